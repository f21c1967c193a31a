// Package fake is the home of every stand-in for the outside world: the
// processors, the mail server and anything else the service talks to that a
// developer's machine or a test does not have. Nothing under service/ imports
// it; serve -dev, the fakestripe and mailsink commands and the tests do.
//
//	fakestripe  a stateful Stripe (charges, customers, refunds, idempotency keys, faults, webhooks)
//	fakeadyen   a stateful Adyen Checkout (stored cards, payments, refunds, idempotency keys, faults)
//	mailsink    an SMTP server that keeps what it receives
//	fakebank    an acquirer that writes settlement files from fakestripe's ledger
//	sftpserver  a real sshd serving SFTP on loopback, for tests
//	challenge   the bank's 3-D Secure test page of both fakes (Complete / Fail)
//	delivery    how fakestripe's webhooks and fakeadyen's notifications are sent: at least once, with retries
package fake
