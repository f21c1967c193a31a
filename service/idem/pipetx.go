package idem

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/atomicrides/atomicrides/dbgen"
)

// pipeTx is a transaction on one pooled connection that spends no round
// trip of its own: its BEGIN goes to the server in one pipeline with its
// first statement, and its COMMIT in one pipeline with the statement sent
// through CommitWith (the phase's record on the key). A transaction that
// sends no statement sends nothing at all.
//
// It is a pgx.Tx for the phases, sqlc's queries and River's InsertTx; what
// it does not support is a nested transaction (Begin), which no phase uses.
// Whether a transaction is still open is the connection's own status, so a
// failed pipeline leaves no doubt about what to roll back.
type pipeTx struct {
	conn *pgxpool.Conn
	// begin is the BEGIN still to send, "" once sent.
	begin string
	// ended: committed or rolled back.
	ended bool
}

func beginSQL(iso pgx.TxIsoLevel) string {
	if iso == "" {
		return "BEGIN"
	}
	return "BEGIN ISOLATION LEVEL " + string(iso)
}

var (
	errNestedPipeTx = errors.New("idem: a phase's transaction has no nested transactions")
	_               = pgx.Tx((*pipeTx)(nil))
)

// open sends the pending BEGIN on its own; for the calls that cannot carry
// it in a pipeline (batches, COPY, Prepare).
func (t *pipeTx) open(ctx context.Context) error {
	if t.ended {
		return pgx.ErrTxClosed
	}
	if t.begin == "" {
		return nil
	}
	_, err := t.conn.Exec(ctx, t.begin)
	t.begin = ""
	return err
}

// Exec runs a statement, with the pending BEGIN in front of it.
func (t *pipeTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.ended {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	if t.begin == "" {
		return t.conn.Exec(ctx, sql, args...)
	}
	b := &pgx.Batch{}
	b.Queue(t.begin)
	b.Queue(sql, args...)
	t.begin = ""
	br := t.conn.SendBatch(ctx, b)
	_, err := br.Exec()
	var tag pgconn.CommandTag
	if err == nil {
		tag, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

// Query runs a query, with the pending BEGIN in front of it.
func (t *pipeTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.ended {
		return nil, pgx.ErrTxClosed
	}
	if t.begin == "" {
		return t.conn.Query(ctx, sql, args...)
	}
	b := &pgx.Batch{}
	b.Queue(t.begin)
	b.Queue(sql, args...)
	t.begin = ""
	br := t.conn.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// QueryRow runs a query of one row, with the pending BEGIN in front of it.
func (t *pipeTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := t.Query(ctx, sql, args...)
	return &pipeRow{rows: rows, err: err}
}

// SendBatch sends the pending BEGIN, then the batch.
func (t *pipeTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := t.open(ctx); err != nil {
		return errBatchResults{err}
	}
	return t.conn.SendBatch(ctx, b)
}

// CopyFrom sends the pending BEGIN, then the COPY.
func (t *pipeTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.open(ctx); err != nil {
		return 0, err
	}
	return t.conn.CopyFrom(ctx, table, columns, src)
}

// Prepare prepares a statement on the connection.
func (t *pipeTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if t.ended {
		return nil, pgx.ErrTxClosed
	}
	return t.conn.Conn().Prepare(ctx, name, sql)
}

// LargeObjects is not supported: no phase uses large objects.
func (t *pipeTx) LargeObjects() pgx.LargeObjects { return pgx.LargeObjects{} }

// Begin is not supported: no phase nests a transaction.
func (t *pipeTx) Begin(context.Context) (pgx.Tx, error) { return nil, errNestedPipeTx }

// Conn returns the underlying connection.
func (t *pipeTx) Conn() *pgx.Conn { return t.conn.Conn() }

// Commit commits, unless CommitWith already did or nothing was sent.
func (t *pipeTx) Commit(ctx context.Context) error {
	if t.ended {
		return nil
	}
	t.ended = true
	if t.begin != "" {
		return nil
	}
	tag, err := t.conn.Exec(ctx, "COMMIT")
	if err != nil {
		return err
	}
	if tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

// Rollback rolls back whatever is still open on the connection.
func (t *pipeTx) Rollback(ctx context.Context) error {
	if t.ended {
		return pgx.ErrTxClosed
	}
	t.ended = true
	if t.begin != "" || t.conn.Conn().PgConn().TxStatus() == 'I' {
		return nil
	}
	_, err := t.conn.Exec(ctx, "ROLLBACK")
	return err
}

// CommitWith returns where to send the last statement of tx: for a pipeTx,
// a dbgen.DBTX whose Exec or QueryRow sends the statement and COMMIT in one
// pipeline, the transaction's last round trip; for any other transaction,
// tx itself. Only Exec or QueryRow may be used on it, once, and nothing on
// tx after it: the statement's result is known only once the commit is
// sent, so what must hold for the transaction to commit is made to hold
// before it (a lock on the row it updates, say).
func CommitWith(tx pgx.Tx) dbgen.DBTX {
	if t, ok := tx.(*pipeTx); ok {
		return pipeCommit{t}
	}
	return tx
}

type pipeCommit struct{ t *pipeTx }

// Exec sends the statement and COMMIT (and the BEGIN if still pending) in
// one pipeline. A COMMIT that rolled back is pgx.ErrTxCommitRollback.
func (c pipeCommit) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	t := c.t
	if t.ended {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	b := &pgx.Batch{}
	if t.begin != "" {
		b.Queue(t.begin)
	}
	b.Queue(sql, args...)
	b.Queue("COMMIT")
	hadBegin := t.begin != ""
	t.begin = ""
	br := t.conn.SendBatch(ctx, b)
	var (
		tag pgconn.CommandTag
		err error
	)
	if hadBegin {
		_, err = br.Exec()
	}
	if err == nil {
		tag, err = br.Exec()
	}
	if err == nil {
		var ctag pgconn.CommandTag
		if ctag, err = br.Exec(); err == nil && ctag.String() == "ROLLBACK" {
			err = pgx.ErrTxCommitRollback
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		t.ended = true
	}
	return tag, err
}

// Query is not supported: the last statement is an Exec or a QueryRow.
func (c pipeCommit) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return nil, errors.New("idem: CommitWith carries an Exec or a QueryRow only")
}

// QueryRow sends the query and COMMIT (and the BEGIN if still pending) in
// one pipeline; the row is read, then the COMMIT's answer, when it is
// scanned.
func (c pipeCommit) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	t := c.t
	if t.ended {
		return &pipeRow{err: pgx.ErrTxClosed}
	}
	b := &pgx.Batch{}
	hadBegin := t.begin != ""
	if hadBegin {
		b.Queue(t.begin)
	}
	b.Queue(sql, args...)
	b.Queue("COMMIT")
	t.begin = ""
	return &commitRow{t: t, br: t.conn.SendBatch(ctx, b), hadBegin: hadBegin}
}

// commitRow is the row of a query sent with COMMIT behind it.
type commitRow struct {
	t        *pipeTx
	br       pgx.BatchResults
	hadBegin bool
}

func (r *commitRow) Scan(dest ...any) error {
	var err error
	if r.hadBegin {
		_, err = r.br.Exec()
	}
	if err == nil {
		err = r.br.QueryRow().Scan(dest...)
	}
	// No row is still an answer: the COMMIT follows it.
	if err == nil || errors.Is(err, pgx.ErrNoRows) {
		ctag, cerr := r.br.Exec()
		switch {
		case cerr != nil:
			err = cerr
		case ctag.String() == "ROLLBACK":
			err = pgx.ErrTxCommitRollback
		}
	}
	if cerr := r.br.Close(); err == nil {
		err = cerr
	}
	if err == nil || errors.Is(err, pgx.ErrNoRows) {
		r.t.ended = r.t.conn.Conn().PgConn().TxStatus() == 'I'
	}
	return err
}

// batchRows are the rows of a query sent in a pipeline: closing them closes
// the pipeline's results too.
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	closed bool
	err    error
}

func (r *batchRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	r.err = r.br.Close()
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// pipeRow is QueryRow's row over Query, with pgx's semantics: no row is
// pgx.ErrNoRows.
type pipeRow struct {
	rows pgx.Rows
	err  error
}

func (r *pipeRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// errBatchResults are the results of a batch that was never sent.
type errBatchResults struct{ err error }

func (r errBatchResults) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, r.err }
func (r errBatchResults) Query() (pgx.Rows, error)         { return nil, r.err }
func (r errBatchResults) QueryRow() pgx.Row                { return &pipeRow{err: r.err} }
func (r errBatchResults) Close() error                     { return r.err }
func (r errBatchResults) Tx() pgx.Tx                       { return nil }
