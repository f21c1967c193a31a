// Package fakebank is a stand-in for the acquirer's bank: it writes
// settlement files (the layout of service/settlementfile) from the fake
// Stripe's ledger, with fees, into an inbox directory, the way the bank
// uploads them: as "<name>.part", renamed to "<name>" once written.
package fakebank

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/service/settlementfile"
)

// Fee is the fake acquirer's fee for a charge of amount minor units: 2.9%
// plus 30, rounded half up, as Stripe's published card price in the US.
// Refunds carry no fee.
func Fee(amount int64) int64 { return (amount*29+500)/1000 + 30 }

// Statement returns the settlement lines of charges and refunds, settled by
// one payout: a line per succeeded charge that took money (gross what was
// captured, less Fee), a line per succeeded refund that returned money
// (gross minus its amount), and per currency a
// payout line that moves the net total to the bank account. Lines come in
// the order given; ids of balance transactions are derived from the
// objects', so the same ledger gives the same file.
func Statement(charges []fakestripe.Charge, refunds []fakestripe.Refund, payoutID string, at time.Time) []settlementfile.Line {
	at = at.UTC().Truncate(time.Second)
	effective := at.Add(48 * time.Hour)
	var lines []settlementfile.Line
	net := map[string]int64{}
	add := func(l settlementfile.Line) {
		l.PayoutID, l.PayoutEffectiveAt = payoutID, effective
		l.BalanceTransactionID = txnID(l.SourceID, l.Category)
		l.NetCents = l.GrossCents - l.FeeCents
		net[l.Currency] += l.NetCents
		lines = append(lines, l)
	}
	for _, c := range charges {
		if !settles(c) {
			continue
		}
		captured := c.Amount - c.AmountReleased
		add(settlementfile.Line{
			Created: c.Created.UTC().Truncate(time.Second), Currency: c.Currency,
			GrossCents: captured, FeeCents: Fee(captured), Category: settlementfile.CategoryCharge,
			SourceID: c.ID, Description: c.Description,
		})
	}
	for _, r := range refunds {
		if !settlesRefund(r) {
			continue
		}
		add(settlementfile.Line{
			Created: r.Created.UTC().Truncate(time.Second), Currency: r.Currency,
			GrossCents: -r.Amount, Category: settlementfile.CategoryRefund, SourceID: r.ID,
		})
	}
	currencies := make([]string, 0, len(net))
	for c := range net {
		currencies = append(currencies, c)
	}
	sort.Strings(currencies)
	for _, c := range currencies {
		source := payoutID
		if len(currencies) > 1 {
			source = payoutID + "_" + c
		}
		lines = append(lines, settlementfile.Line{
			PayoutID: payoutID, PayoutEffectiveAt: effective, BalanceTransactionID: txnID(source, "payout"),
			Created: at, Currency: c, GrossCents: -net[c], NetCents: -net[c],
			Category: settlementfile.CategoryPayout, SourceID: source, Description: "STRIPE PAYOUT",
		})
	}
	for i := range lines {
		lines[i].Number = i + 2
	}
	return lines
}

// Render writes lines as a settlement file.
func Render(lines []settlementfile.Line) []byte {
	var b bytes.Buffer
	if err := settlementfile.Write(&b, lines); err != nil {
		panic(err) // a bytes.Buffer does not fail
	}
	return b.Bytes()
}

func txnID(source, category string) string {
	sum := sha256.Sum256([]byte(category + "/" + source))
	return "txn_" + hex.EncodeToString(sum[:12])
}

// settles reports whether the bank settles c: a succeeded charge that
// took money. A hold is settled once captured, for what was captured (its
// released rest took nothing); a hold never captured, outstanding or
// released, never is.
func settles(c fakestripe.Charge) bool {
	return c.Status == fakestripe.ChargeSucceeded && !c.Uncaptured && c.Amount > c.AmountReleased
}

// settlesRefund reports whether the bank settles r: a succeeded refund
// that returned money. The refund by which Stripe shows a hold released
// (Refund.Release) returned none and has no balance transaction.
func settlesRefund(r fakestripe.Refund) bool {
	return r.Status == "succeeded" && !r.Release
}

// Bank settles what the fake Stripe charged and refunded into an inbox
// directory, one file per call of Settle. It remembers what it settled, so
// each charge and refund is in exactly one file. It is safe for concurrent
// use.
type Bank struct {
	// Stripe is the ledger settled.
	Stripe *fakestripe.Server
	// Inbox is the directory the files are written to.
	Inbox string

	mu      sync.Mutex
	settled map[string]bool
	seq     int
}

// Settle writes one settlement file of everything the ledger holds that no
// earlier file settled, and returns its name and lines; with nothing new it
// writes nothing and returns "".
func (b *Bank) Settle(now time.Time) (string, []settlementfile.Line, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.settled == nil {
		b.settled = map[string]bool{}
	}
	snap := b.Stripe.Snapshot()
	var charges []fakestripe.Charge
	var refunds []fakestripe.Refund
	for _, c := range snap.Charges {
		if settles(c) && !b.settled[c.ID] {
			charges = append(charges, c)
		}
	}
	for _, r := range snap.Refunds {
		if settlesRefund(r) && !b.settled[r.ID] {
			refunds = append(refunds, r)
		}
	}
	if len(charges)+len(refunds) == 0 {
		return "", nil, nil
	}
	b.seq++
	stamp := now.UTC().Format("20060102T150405")
	name := fmt.Sprintf("settlement_%s_%04d.csv", stamp, b.seq)
	lines := Statement(charges, refunds, fmt.Sprintf("po_fake%s%04d", now.UTC().Format("20060102150405"), b.seq), now)
	if err := Upload(b.Inbox, name, Render(lines)); err != nil {
		b.seq--
		return "", nil, err
	}
	for _, c := range charges {
		b.settled[c.ID] = true
	}
	for _, r := range refunds {
		b.settled[r.ID] = true
	}
	return name, lines, nil
}

// Upload writes content into dir as the bank does: "<name>.part" first,
// renamed to name once complete.
func Upload(dir, name string, content []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	part := filepath.Join(dir, name+".part")
	if err := os.WriteFile(part, content, 0o644); err != nil {
		return err
	}
	return os.Rename(part, filepath.Join(dir, name))
}
