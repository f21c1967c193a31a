package payments_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/payments"
)

// stripe-mock (github.com/stripe/stripe-mock, a tool of this module) is
// Stripe's own stateless mock, validating requests against the OpenAPI
// spec and answering with fixtures. The tests here check that the adapter's
// requests are valid and that its decoding fits Stripe's real shapes; the
// behaviour of the adapter is tested against the stateful fake in
// fakestripe.

func TestMain(m *testing.M) {
	code := m.Run()
	stopStripeMock()
	os.Exit(code)
}

// stripeMockProcess is the stripe-mock shared by the tests of this package,
// started by the first test that needs it and stopped by TestMain.
var stripeMockProcess struct {
	once    sync.Once
	baseURL string
	err     error
	dir     string
	cmd     *exec.Cmd
	exited  chan struct{}
}

// stripeMock returns the base URL of a running stripe-mock, building and
// starting it on first use. It fails the test when that is not possible:
// the wire test is never skipped.
func stripeMock(t *testing.T) string {
	t.Helper()
	p := &stripeMockProcess
	p.once.Do(func() { p.baseURL, p.err = startStripeMock() })
	require.NoError(t, p.err, "stripe-mock must build and start")
	return p.baseURL
}

func startStripeMock() (string, error) {
	p := &stripeMockProcess
	dir, err := os.MkdirTemp("", "stripe-mock-")
	if err != nil {
		return "", err
	}
	p.dir = dir
	bin := filepath.Join(dir, "stripe-mock")
	// The module pins stripe-mock as a tool, so this builds offline from the
	// module cache.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/stripe/stripe-mock").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build stripe-mock: %w\n%s", err, out)
	}

	httpAddr, err := freeAddr()
	if err != nil {
		return "", err
	}
	httpsAddr, err := freeAddr()
	if err != nil {
		return "", err
	}
	logFile, err := os.Create(filepath.Join(dir, "stripe-mock.log"))
	if err != nil {
		return "", err
	}
	defer logFile.Close() // the child keeps its own descriptor
	cmd := exec.Command(bin, "-http-addr", httpAddr, "-https-addr", httpsAddr)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start stripe-mock: %w", err)
	}
	p.cmd = cmd
	p.exited = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()

	// Readiness: poll until the HTTP port accepts connections, within a
	// bounded time, giving up early if the process died.
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", httpAddr, time.Second)
		if err == nil {
			_ = conn.Close()
			return "http://" + httpAddr, nil
		}
		select {
		case <-p.exited:
			log, _ := os.ReadFile(logFile.Name())
			return "", fmt.Errorf("stripe-mock exited before listening:\n%s", log)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return "", errors.New("stripe-mock did not listen on " + httpAddr + " within 30s")
		}
	}
}

func stopStripeMock() {
	p := &stripeMockProcess
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	if p.dir != "" {
		_ = os.RemoveAll(p.dir)
	}
}

// freeAddr returns a loopback address with a port that was free a moment
// ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func TestStripeMockWireCompatibility(t *testing.T) {
	t.Parallel()
	c := payments.New(payments.Config{
		APIBase:           stripeMock(t),
		SecretKey:         "sk_test_123",
		MaxNetworkRetries: payments.NoRetries,
	})
	ctx := context.Background()

	cust, err := c.CustomerCreate(ctx, service.CustomerCreateParams{
		IdempotencyKey: "user-1-customer", Email: "rider@example.com", Source: "tok_visa",
	})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(cust.ID, "cus_"), cust.ID)

	// stripe-mock's search answers with a fixture, whatever the query, so
	// only the decoding of a non-empty result can be checked here.
	found, err := c.CustomerFind(ctx, "user-1-customer")
	require.NoError(t, err)
	require.NotEmpty(t, found)
	require.True(t, strings.HasPrefix(found[0].ID, "cus_"), found[0].ID)

	ch, err := c.ChargeCreate(ctx, service.ChargeCreateParams{
		IdempotencyKey: "ride-1-charge", CustomerID: cust.ID, AmountCents: 1250, Currency: "eur",
		Description: "Ride", Tag: service.Tag{Namespace: "ns", Rider: "rider", Key: "ride-1-charge"},
	})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(ch.ID, "ch_"), ch.ID)
	require.Equal(t, int64(1250), ch.AmountCents)
	require.Equal(t, "eur", ch.Currency)

	foundCh, err := c.ChargeFind(ctx, service.ChargeFindParams{Key: "ride-1-charge"})
	require.NoError(t, err)
	require.NotEmpty(t, foundCh)
	require.True(t, strings.HasPrefix(foundCh[0].ID, "ch_"), foundCh[0].ID)

	// Reconciliation's lists are checked against Stripe's spec too.
	listed, err := c.ChargeListSince(ctx, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.NotEmpty(t, listed)
	refundsSince, err := c.RefundListSince(ctx, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.NotEmpty(t, refundsSince)

	ref, err := c.RefundCreate(ctx, service.RefundCreateParams{IdempotencyKey: "ride-1-refund", ChargeID: ch.ID})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(ref.ID, "re_"), ref.ID)
	require.NotEmpty(t, ref.ChargeID)
	require.Equal(t, "succeeded", ref.Status)

	// stripe-mock lists a fixture whatever the charge: the request is
	// checked against Stripe's spec and the answer decodes.
	refunds, err := c.RefundList(ctx, ch.ID)
	require.NoError(t, err)
	require.NotEmpty(t, refunds)
	require.True(t, strings.HasPrefix(refunds[0].ID, "re_"), refunds[0].ID)
	require.NotEmpty(t, refunds[0].ChargeID)
}

func TestStripeMockErrorDecoding(t *testing.T) {
	t.Parallel()
	// Without a key stripe-mock answers 401 invalid_request_error, which must
	// arrive as a decoded Stripe error, not as an opaque failure. A rejected
	// key is a configuration problem, never a definitive answer for a rider.
	c := payments.New(payments.Config{APIBase: stripeMock(t), MaxNetworkRetries: payments.NoRetries})

	_, err := c.CustomerFind(context.Background(), "user-1-customer")
	var pe *service.PaymentError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, service.PaymentClassConfiguration, pe.Class)
	require.Nil(t, service.PaymentFinal(err))
	require.Equal(t, http.StatusUnauthorized, pe.HTTPStatus)
	require.Contains(t, pe.Message, "Authorization")
}
