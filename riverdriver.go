package main

import (
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// listenDriver is River's pgx driver on one pool whose listener (the LISTEN
// for new jobs, leadership and control messages) holds a connection of
// another: behind PgBouncer in transaction pooling mode, a LISTEN through
// the pooler would be issued on whichever server connection the statement
// got and never heard from again, so the listener needs PostgreSQL itself.
type listenDriver struct {
	*riverpgxv5.Driver
	listen *riverpgxv5.Driver
}

// GetListener returns a listener on the direct pool.
func (d listenDriver) GetListener(params *riverdriver.GetListenenerParams) riverdriver.Listener {
	return d.listen.GetListener(params)
}

// riverDriver is River's driver on pool, listening on direct (which may be
// pool itself).
func riverDriver(pool, direct *pgxpool.Pool) riverdriver.Driver[pgx.Tx] {
	if direct == pool {
		return riverpgxv5.New(pool)
	}
	return listenDriver{Driver: riverpgxv5.New(pool), listen: riverpgxv5.New(direct)}
}
