// Package audit records what happened to the service's resources (the
// audit_records table), always in the transaction that made it happen: a
// record exists exactly when its change committed.
//
// Every domain package writes through Record; nothing reads the records but
// operators and tests.
package audit

import (
	"context"
	"encoding/json"
	"net/netip"

	"github.com/atomicrides/atomicrides/dbgen"
)

var queries = dbgen.New()

// Record records action on the resource (resourceType, resourceID) of the
// user userID, from ip (nil: the service itself), with data marshalled as
// JSON, in the caller's transaction tx.
func Record(ctx context.Context, tx dbgen.DBTX, action, resourceType string, resourceID, userID int64, ip *netip.Addr, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	_, err = queries.AuditRecordCreate(ctx, tx, dbgen.AuditRecordCreateParams{
		Action: action, Data: b, OriginIP: ip, ResourceID: resourceID, ResourceType: resourceType, UserID: userID,
	})
	return err
}
