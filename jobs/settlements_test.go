package jobs_test

import (
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakebank"
	"github.com/atomicrides/atomicrides/internal/fake/sftpserver"
	"github.com/atomicrides/atomicrides/jobs"
	"github.com/atomicrides/atomicrides/service/bankinbox"
	"github.com/atomicrides/atomicrides/service/settlementfile"
	"github.com/atomicrides/atomicrides/service/settlements"
)

// settlementBundle is a world whose bank's inbox is a real sshd.
type settlementBundle struct {
	*testBundle
	srv  *sftpserver.Server
	bank *fakebank.Bank
}

func setupSettlements(t *testing.T, hostKey string) *settlementBundle {
	t.Helper()
	srv := sftpserver.Start(t)
	var cfg bankinbox.Config
	require.NoError(t, cfg.ParseURL(srv.URL()))
	if hostKey == "" {
		hostKey = srv.HostKeyLine
	}
	key, err := bankinbox.ParseHostKey(hostKey)
	require.NoError(t, err)
	cfg.HostKey = key
	cfg.Signer, err = bankinbox.LoadSigner(srv.KeyFile)
	require.NoError(t, err)
	b := setupWith(t, options{inbox: &cfg})
	return &settlementBundle{testBundle: b, srv: srv, bank: &fakebank.Bank{Stripe: b.Stripe.Server, Inbox: srv.Inbox}}
}

// fetch runs one fetch of the inbox through River and waits for it.
func (b *settlementBundle) fetch(t *testing.T) *river.Event {
	t.Helper()
	_, err := b.client.Insert(b.Ctx, jobs.SettlementFetchArgs{}, nil)
	require.NoError(t, err)
	return b.waitFinal(t, jobs.SettlementFetchArgs{}.Kind(), 1)[0]
}

func (b *settlementBundle) totals(t *testing.T) settlements.Totals {
	t.Helper()
	tot, err := b.Settlements.Totals(b.Ctx)
	require.NoError(t, err)
	return tot
}

func sum(lines ...[]settlementfile.Line) settlements.Totals {
	var s settlements.Totals
	for _, ls := range lines {
		for _, l := range ls {
			s.Lines++
			s.GrossCents += l.GrossCents
			s.FeeCents += l.FeeCents
			s.NetCents += l.NetCents
		}
	}
	return s
}

func TestSettlementFetchOverSFTP(t *testing.T) {
	t.Parallel()
	b := setupSettlements(t, "")
	uid := b.rider(t, "bank@example.com")
	b.Ride(t, uid)
	b.Ride(t, uid)
	name1, lines1, err := b.bank.Settle(time.Now())
	require.NoError(t, err)

	// A file the bank is still writing is not taken.
	b.Ride(t, uid)
	lines2 := fakebank.Statement(b.Stripe.Charges()[2:], nil, "po_second", time.Now())
	b.srv.PutPart(t, "settlement_second.csv", fakebank.Render(lines2))

	require.Equal(t, rivertype.JobStateCompleted, b.fetch(t).Job.State)
	b.waitFinal(t, settlements.ApplyArgs{}.Kind(), 1)
	require.Equal(t, sum(lines1), b.totals(t))
	require.Equal(t, []string{"settlement_second.csv.part"}, b.srv.InboxNames(t))
	require.Len(t, b.srv.ArchiveNames(t), 1)
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM settlement_files`))

	// Once complete it is fetched; the first file, uploaded again as is,
	// is archived again and writes nothing.
	b.srv.Complete(t, "settlement_second.csv")
	require.NoError(t, fakebank.Upload(b.srv.Inbox, name1, fakebank.Render(lines1)))
	require.Equal(t, rivertype.JobStateCompleted, b.fetch(t).Job.State)
	b.waitFinal(t, settlements.ApplyArgs{}.Kind(), 1)
	require.Equal(t, sum(lines1, lines2), b.totals(t))
	require.Empty(t, b.srv.InboxNames(t))
	require.Len(t, b.srv.ArchiveNames(t), 2, "the same name and content archive to one name")
	require.Equal(t, 2, b.Count(t, `SELECT count(*) FROM settlement_files`))
	require.Equal(t, 2, b.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'settlement_apply'`))

	rep, err := b.Settlements.Check(b.Ctx, 10)
	require.NoError(t, err)
	require.True(t, rep.Clean(), "%+v", rep)
}

func TestSettlementFetchRefusesAWrongHostKey(t *testing.T) {
	t.Parallel()
	b := setupSettlements(t, sftpserver.NewKey(t))
	_, _, err := b.bank.Settle(time.Now()) // nothing charged: no file
	require.NoError(t, err)
	b.srv.Put(t, "settlement_x.csv", []byte("automatic_payout_id\n"))
	ev := b.fetch(t)
	require.Equal(t, rivertype.JobStateDiscarded, ev.Job.State, "after its last attempt, in River's dead letters")
	require.Contains(t, ev.Job.Errors[len(ev.Job.Errors)-1].Error, "host key mismatch")
	require.Equal(t, []string{"settlement_x.csv"}, b.srv.InboxNames(t), "nothing read, nothing moved")
	require.Zero(t, b.Count(t, `SELECT count(*) FROM settlement_files`))
}
