// Package receipts sends the receipts of rides, trips, refunds and
// refunded orphan charges, each exactly once as far as the service can
// tell, and the same message when it cannot.
//
// It owns the table receipts (and orphan_refunds.receipt_sent_at) and the
// metric atomicrides_receipts_total. Every send follows one rule:
//
//	job (inserted with the phase that made the money move)
//	  └─► read: sent already? ──yes──► false, nothing sent
//	        └─no─► the message, with no transaction open, under a
//	               Message-ID the same on every send (MessageID,
//	               OrphanMessageID)
//	                 └─► the mail server took it ──► one transaction:
//	                       what the caller records (the job's completion)
//	                       + the receipt's record, at the COMMIT
//
// A crash between the send and the record resends the same message, which
// the Message-ID makes recognisable downstream; nothing is recorded for a
// message the server did not take.
//
// A Service is built from the idempotency engine (its transactions), the
// mailer port (service.Mailer, implemented by package mail), the sender, a
// clock and a Prometheus registerer. It reads the rides, refunds and
// orphan refunds it writes about and calls no other domain package;
// package jobs works the receipt jobs.
package receipts
