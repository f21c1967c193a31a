// Package settlements records the bank's settlement files and applies them,
// each line exactly once, and reports what does not match our charges and
// refunds.
//
// It owns the tables settlement_files, settlement_lines and
// settlement_quarantined_lines, the apply job (ApplyArgs) and the metrics
// atomicrides_settlement_*. Its flows:
//
//	Receive ──[file row (name, SHA-256, version) + ApplyArgs job (InsertTx)]──► pending
//	   same name and content: nothing written; same name, other content: the
//	   next version, flagged for an operator
//	Apply (the job) ──[batch of BatchLines lines + cursor, one transaction]──► … ──► applied
//	   a line applied before (its reference and type) is a duplicate; a
//	   malformed one is quarantined; an unreadable header rejects the file
//	Check ──► the discrepancies (lines naming nothing of ours, amounts that
//	   differ, charges and refunds of ours unsettled past MaxAge) and the
//	   flagged files, also as gauges
//
// A Service is built from the idempotency engine (its transactions and
// their retries), River's insert-only client and a Prometheus registerer.
// It matches lines against rides and refunds by reading their tables (the
// charge and refund ids the processors gave us) and calls no other domain
// package. Package jobs fetches the bank's inbox and works the apply job;
// the root package's settlements command prints Check and FileShow.
package settlements
