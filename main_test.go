package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/binrun"
	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

// TestMain builds the binary once for the tests that run it, and removes it
// when they end.
func TestMain(m *testing.M) { binrun.Main(m) }

// TestServeShutsDownGracefully runs the real binary, holds requests at
// Stripe, sends SIGTERM, and expects every in-flight request to finish with
// 201 and the process to exit 0.
func TestServeShutsDownGracefully(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	bin := binrun.Build(t)

	fake := testkit.NewStripe(t)

	addr := binrun.FreeAddr(t)
	logs := &binrun.Buffer{}
	proc := binrun.Start(t, binrun.Cmd{Bin: bin, Args: []string{"serve", "-dev"}, Output: logs, Env: []string{
		"DATABASE_URL=" + dbtest.NewURL(t),
		"ADDR=" + addr,
		"ADMIN_TOKEN=shutdown-admin-token-0123456789abcdef0123",
		"STRIPE_API_BASE=" + fake.URL,
		"STRIPE_SECRET_KEY=sk_test_shutdown",
		"MAIL_DIR=" + t.TempDir(),
	}}) // -dev: receipts to the built-in mail sink

	base := "http://" + addr
	require.NoError(t, proc.Ready(ctx, base+"/readyz", time.Minute), "logs:\n%s", logs.String())

	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, base+"/users/shutdown@example.com", nil)
	req.Header.Set("Authorization", "Bearer shutdown-admin-token-0123456789abcdef0123")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	var created struct {
		APIKey string `json:"api_key"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&created))
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	// Hold every charge at Stripe until SIGTERM has been sent.
	const n = 8
	gate, fired := make(chan struct{}), make(chan struct{}, n)
	fake.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultLatency, Gate: gate, Fired: fired, Times: n})

	statuses := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := `{"origin_lat":1,"origin_lon":2,"target_lat":3,"target_lon":4}`
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/rides", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+created.APIKey)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", fmt.Sprintf("shutdown-key-%012d", i))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				statuses <- 0
				return
			}
			resp.Body.Close()
			statuses <- resp.StatusCode
		}()
	}
	for range n {
		<-fired // every request is in flight, waiting at Stripe
	}
	require.NoError(t, proc.Signal(syscall.SIGTERM))
	close(gate)
	wg.Wait()
	close(statuses)
	for s := range statuses {
		require.Equal(t, http.StatusCreated, s, "an in-flight request failed during shutdown; logs:\n%s", logs.String())
	}
	select {
	case <-proc.Done():
		require.NoError(t, proc.Err(), "exit status; logs:\n%s", logs.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("serve did not exit after SIGTERM; logs:\n%s", logs.String())
	}
	require.Len(t, fake.SucceededCharges(), n)
}
