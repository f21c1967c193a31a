// Package pgenv finds, or provides, the PostgreSQL server that the service's
// tests and local runs use, so that neither depends on a server that someone
// set up by hand.
//
// Resolve looks, in order, at:
//
//  1. environment variables holding a connection URL (DATABASE_URL; tests
//     consult TEST_DATABASE_URL first, see TestEnvVars);
//  2. a server answering on 127.0.0.1:5432 (as user postgres, then as the
//     current OS user), on which it uses or creates the database
//     "atomicrides";
//  3. a throwaway cluster, which it starts from the installed server binaries
//     under <project root>/.pgdata (see StartCluster) and in which it creates
//     the database "atomicrides";
//
// and otherwise fails with an error that tells how to get PostgreSQL.
//
// A throwaway cluster outlives the process that started it, so that later test
// processes and `task run` reuse it instead of starting another; StopCluster
// (`task db:down`) stops it. The command in cmd/pgenv exposes all of this to
// the Taskfile.
//
// For the chaos suite and the benchmark it also runs what operators put
// around PostgreSQL: StartPgBouncer, PgBouncer in transaction pooling mode
// in front of a server, and StartPatroni, a Patroni cluster on one etcd
// member whose nodes Patroni promotes by itself (KillNode ends one as the
// loss of its machine would). Both run as the cluster's account when the
// tests run as root, and live until their Stop.
package pgenv
