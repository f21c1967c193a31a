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
// sends no statement sends nothing at all. A guard (guarded: the phase's
// fence on the key) travels the same way, behind the BEGIN and in front of
// the first statement, and is read before that statement's answer.
//
// It is a pgx.Tx for the phases, sqlc's queries and River's InsertTx; what
// it does not support is a nested transaction (Begin), which no phase uses.
// Whether a transaction is still open is the connection's own status, so a
// failed pipeline leaves no doubt about what to roll back.
type pipeTx struct {
	conn *pgxpool.Conn
	// begin is the BEGIN still to send, "" once sent.
	begin string
	// guard is the guard still to send, nil once sent.
	guard *guard
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

// guard is a query that must answer at least one row for its transaction
// to go on; no row fails the transaction with err.
type guard struct {
	sql  string
	args []any
	err  error
}

// pending is what a pipeline carries in front of its statement: the BEGIN
// and the guard still to send.
type pending struct {
	begin bool
	guard *guard
}

// hasPending reports whether a BEGIN or a guard is still to send.
func (t *pipeTx) hasPending() bool { return t.begin != "" || t.guard != nil }

// takePending queues the pending BEGIN and guard into b, in that order, and
// marks them sent.
func (t *pipeTx) takePending(b *pgx.Batch) pending {
	p := pending{begin: t.begin != "", guard: t.guard}
	if p.begin {
		b.Queue(t.begin)
	}
	if p.guard != nil {
		b.Queue(p.guard.sql, p.guard.args...)
	}
	t.begin, t.guard = "", nil
	return p
}

// read reads the answers of what takePending queued: an error of the BEGIN
// or the guard, or the guard's error when it found no row.
func (p pending) read(br pgx.BatchResults) error {
	if p.begin {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	if p.guard == nil {
		return nil
	}
	rows, err := br.Query()
	if err != nil {
		return err
	}
	found := rows.Next()
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if !found {
		return p.guard.err
	}
	return nil
}

// open sends the pending BEGIN and guard on their own; for the calls that
// cannot carry them in a pipeline (batches, COPY, Prepare).
func (t *pipeTx) open(ctx context.Context) error {
	if t.ended {
		return pgx.ErrTxClosed
	}
	if !t.hasPending() {
		return nil
	}
	b := &pgx.Batch{}
	p := t.takePending(b)
	br := t.conn.SendBatch(ctx, b)
	err := p.read(br)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// Exec runs a statement, with the pending BEGIN and guard in front of it.
func (t *pipeTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.ended {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	if !t.hasPending() {
		return t.conn.Exec(ctx, sql, args...)
	}
	b := &pgx.Batch{}
	p := t.takePending(b)
	b.Queue(sql, args...)
	br := t.conn.SendBatch(ctx, b)
	err := p.read(br)
	var tag pgconn.CommandTag
	if err == nil {
		tag, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

// Query runs a query, with the pending BEGIN and guard in front of it.
func (t *pipeTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.ended {
		return nil, pgx.ErrTxClosed
	}
	if !t.hasPending() {
		return t.conn.Query(ctx, sql, args...)
	}
	b := &pgx.Batch{}
	p := t.takePending(b)
	b.Queue(sql, args...)
	br := t.conn.SendBatch(ctx, b)
	if err := p.read(br); err != nil {
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
	if t.guard != nil {
		// Nothing after the BEGIN was sent: the guard must still hold.
		if err := t.open(ctx); err != nil {
			return err
		}
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
	p := t.takePending(b)
	b.Queue(sql, args...)
	b.Queue("COMMIT")
	br := t.conn.SendBatch(ctx, b)
	var tag pgconn.CommandTag
	err := p.read(br)
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
	p := t.takePending(b)
	b.Queue(sql, args...)
	b.Queue("COMMIT")
	return &commitRow{t: t, br: t.conn.SendBatch(ctx, b), pending: p}
}

// commitRow is the row of a query sent with COMMIT behind it.
type commitRow struct {
	t       *pipeTx
	br      pgx.BatchResults
	pending pending
}

func (r *commitRow) Scan(dest ...any) error {
	err := r.pending.read(r.br)
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

// guarded returns where to send a guard of tx: a query that must find a
// row, or tx fails with err. For a pipeTx it is a dbgen.DBTX whose QueryRow
// queues the query to travel with tx's next statement, behind the BEGIN, so
// that it costs no round trip of its own; the row's Scan returns at once and
// fills nothing (a guard's answer is only whether it found a row), and the
// guard's verdict comes back as the error of the statement it travels with
// (or of the commit). Only QueryRow may be used on it. For any other
// transaction the query runs at once, and no row is err.
func guarded(tx pgx.Tx, err error) dbgen.DBTX {
	if t, ok := tx.(*pipeTx); ok {
		return guardQueue{t: t, err: err}
	}
	return guardNow{DBTX: tx, err: err}
}

type guardQueue struct {
	t   *pipeTx
	err error
}

func (g guardQueue) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errGuardQueryRow
}

func (g guardQueue) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return nil, errGuardQueryRow
}

// QueryRow queues the guard; a guard already queued is sent first.
func (g guardQueue) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if g.t.ended {
		return &pipeRow{err: pgx.ErrTxClosed}
	}
	if g.t.guard != nil {
		if err := g.t.open(ctx); err != nil {
			return &pipeRow{err: err}
		}
	}
	g.t.guard = &guard{sql: sql, args: args, err: g.err}
	return queuedRow{}
}

// queuedRow is the row of a queued guard: its verdict comes later.
type queuedRow struct{}

func (queuedRow) Scan(...any) error { return nil }

type guardNow struct {
	dbgen.DBTX
	err error
}

func (g guardNow) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return guardNowRow{row: g.DBTX.QueryRow(ctx, sql, args...), err: g.err}
}

type guardNowRow struct {
	row pgx.Row
	err error
}

func (r guardNowRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return r.err
	}
	return err
}

var errGuardQueryRow = errors.New("idem: a guard is a QueryRow")
