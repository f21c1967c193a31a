// Package testkit is what the tests of service, jobs, openapi, openapi/client,
// openapi/web, internal/telemetry and the root package share: one isolated
// world per test, built from the project's real parts, and the fixtures
// every package needs in it.
//
// A world (New) is
//
//   - its own PostgreSQL database, a copy of the migrated template of
//     package sql/dbtest, dropped when the test ends;
//   - its own stateful fake Stripe (internal/fake/fakestripe) behind an
//     HTTP server, and a payments client pointed at it that neither retries
//     nor reuses connections, so that a fault the fake injects reaches the
//     service as the lost or failed answer it is;
//   - its own SMTP mail sink (internal/fake/mailsink), keeping messages in
//     memory only, and a mailer sending to it;
//   - a Clock for what the process keeps in memory (its caches); leases,
//     grace periods and ages are judged by the database's clock, and
//     tests move past them by ageing the world's records (Env.Age);
//   - a service.Service over all of them.
//
// Fixtures create what a test starts from: a rider with an API key
// (Env.Rider), a charged ride (Env.Ride), a request abandoned after a
// processor outage (Env.AbandonRide), fresh idempotency keys (NewKey), and
// the charges at the fake Stripe of a ride's request (Env.ChargesOfRide).
//
// Beside a world, the tests of every package share the parts a world is
// made of, for a test that wires its own (a process of the real binary, a
// traced service): NewStripe, NewMailSink and NewMail; another instance of
// the service on a shared database (Instance) with its listener of API-key
// revocations (ListenRevocations); an HTTP client that returns the whole
// answer (Do, DoRaw and Reply, with its problem+json check); the API served
// with every exchange checked against the spec it serves (ServeAPI, Conform,
// and ServeConformingProxy in front of a process of the binary); and a
// headless Chromium (Browser) whose screenshots SaveScreenshot keeps.
//
// Each package keeps its own small bundle, River style, made of a world and
// what that package adds to it (a River client, an HTTP server):
//
//	type testBundle struct {
//		*testkit.Env
//		url string
//	}
//
//	func setup(t *testing.T) *testBundle {
//		t.Helper()
//		env := testkit.New(t)
//		h := openapi.NewHandler(openapi.Config{Service: env.Service})
//		return &testBundle{Env: env, url: testkit.ServeAPI(t, h)}
//	}
//
// Nothing here writes to the working tree; whatever a test needs on disk
// goes under its t.TempDir().
package testkit
