package main

import (
	"log/slog"
	"os"
	"time"

	"github.com/atomicrides/atomicrides/internal/fake/fakebank"
	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/service/bankinbox"
)

// devBankInterval is how often the dev fake bank settles the fake Stripe's
// ledger, and how often serve -dev fetches its inbox unless
// SETTLEMENT_INTERVAL says otherwise.
const devBankInterval = time.Minute

// startDevBank runs, for serve -dev without a bank configured, a fake bank
// that writes a settlement file of the fake Stripe's new charges and
// refunds every devBankInterval into a temporary inbox, served over SFTP on
// loopback by an in-process server; it sets cfg's settlement inbox to it,
// so that the whole loop (charge, settlement file, fetch, apply, match)
// runs on a fresh machine. It says so loudly.
func startDevBank(cfg *config, fake *fakestripe.Server, logger *slog.Logger) (note string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "atomicrides-bank-")
	if err != nil {
		return "", nil, err
	}
	srv, err := fakebank.ServeSFTP(logger)
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	cfg.SettlementInbox = &bankinbox.Config{
		Addr: srv.Addr, User: srv.User, Dir: dir, HostKey: srv.HostKey, Signer: srv.ClientSigner,
	}
	if cfg.SettlementInterval == 0 {
		cfg.SettlementInterval = devBankInterval
	}
	bank := &fakebank.Bank{Stripe: fake, Inbox: dir}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(devBankInterval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				name, lines, err := bank.Settle(now)
				switch {
				case err != nil:
					logger.Error("-dev fake bank: settle", "err", err)
				case name != "":
					logger.Info("-dev fake bank: settlement file uploaded", "file", name, "lines", len(lines))
				}
			}
		}
	}()
	logger.Warn("-dev: SETTLEMENT_SFTP_URL not set, settlement files come from the built-in FAKE bank over a loopback SFTP server",
		"sftp", srv.Addr, "inbox", dir, "every", devBankInterval)
	return "fake bank at sftp://" + srv.User + "@" + srv.Addr + dir, func() {
		close(done)
		<-stopped
		_ = srv.Close()
		_ = os.RemoveAll(dir)
	}, nil
}
