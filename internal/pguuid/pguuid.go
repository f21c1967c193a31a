// Package pguuid makes pgx send a github.com/google/uuid.UUID as the
// sixteen bytes it is. Without it pgx takes the type's driver.Valuer: it
// formats the UUID as text and parses the text back on every query, which
// costs the server a few percent of its CPU per ride (the lease token goes
// with every statement that touches a key).
package pguuid

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Register makes m encode a uuid.UUID parameter through pgx's own binary
// uuid encoding. Scanning is unchanged. m must not have planned an
// encoding yet (a map remembers its plans): call it on a new connection.
func Register(m *pgtype.Map) {
	m.TryWrapEncodePlanFuncs = append([]pgtype.TryWrapEncodePlanFunc{tryWrapEncodePlan}, m.TryWrapEncodePlanFuncs...)
}

// AfterConnect is a pgxpool AfterConnect hook that registers the encoding
// on each new connection.
func AfterConnect(_ context.Context, conn *pgx.Conn) error {
	Register(conn.TypeMap())
	return nil
}

func tryWrapEncodePlan(value any) (pgtype.WrappedEncodePlanNextSetter, any, bool) {
	if u, ok := value.(uuid.UUID); ok {
		return &encodePlan{}, pgtype.UUID{Bytes: u, Valid: true}, true
	}
	return nil, nil, false
}

// encodePlan hands a uuid.UUID to the plan of pgtype.UUID.
type encodePlan struct{ next pgtype.EncodePlan }

func (p *encodePlan) SetNext(next pgtype.EncodePlan) { p.next = next }

func (p *encodePlan) Encode(value any, buf []byte) ([]byte, error) {
	return p.next.Encode(pgtype.UUID{Bytes: value.(uuid.UUID), Valid: true}, buf)
}
