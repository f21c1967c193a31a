package endtoend

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/binrun"
	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
)

// cutOffWithin is how soon a slow or idle client must be cut off.
const cutOffWithin = 45 * time.Second

// TestServersBoundTheirClients runs the binary with its three HTTP servers
// (API, METRICS_ADDR, PPROF_ADDR) on their default bounds: oversized headers
// are refused with 431, a body sent a byte at a time and an idle keep-alive
// connection are cut off, and a payment that legitimately takes longer than
// the server's write timeout still gets its answer.
// serverWriteTimeout is serve's write timeout (httpserver.go): the time a
// handler has to answer before its connection is cut.
const serverWriteTimeout = 30 * time.Second

func TestServersBoundTheirClients(t *testing.T) {
	t.Parallel()
	metricsAddr, pprofAddr := binrun.FreeAddr(t), binrun.FreeAddr(t)
	s := serveBinary(t, "METRICS_ADDR="+metricsAddr, "PPROF_ADDR="+pprofAddr,
		"STRIPE_TIMEOUT="+(serverWriteTimeout+15*time.Second).String())
	apiAddr := strings.TrimPrefix(s.base, "http://")
	servers := map[string]struct{ addr, path string }{
		"api":     {apiAddr, "/healthz"},
		"metrics": {metricsAddr, "/metrics"},
		"pprof":   {pprofAddr, "/debug/pprof/"},
	}

	t.Run("oversized headers", func(t *testing.T) {
		t.Parallel()
		for name, srv := range servers {
			req, err := http.NewRequest(http.MethodGet, "http://"+srv.addr+srv.path, nil)
			require.NoError(t, err)
			req.Header.Set("X-Padding", strings.Repeat("a", 100<<10))
			resp := s.request(t, req)
			require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode, name)
		}
	})

	// Every slow client at once: go test runs only GOMAXPROCS parallel
	// subtests, and each of these waits for a timeout.
	t.Run("slow and idle clients", func(t *testing.T) {
		t.Parallel()
		checks := map[string]func() error{}
		for name, target := range map[string]struct{ addr, method, path string }{
			"api sign-in":     {apiAddr, http.MethodPost, "/book/signin"},
			"api rides":       {apiAddr, http.MethodPost, "/rides"},
			"api no route":    {apiAddr, http.MethodPut, "/nowhere"},
			"api user upsert": {apiAddr, http.MethodPut, "/users/slow@example.com"},
			"metrics":         {metricsAddr, http.MethodPost, "/metrics"},
			"pprof":           {pprofAddr, http.MethodPost, "/debug/pprof/symbol"},
		} {
			checks["dribbled body to "+name] = func() error { return dribbleCutOff(target.addr, target.method, target.path) }
		}
		for name, srv := range servers {
			checks["idle connection to "+name] = func() error { return idleClosed(srv.addr, srv.path) }
		}
		errs := make(map[string]error, len(checks))
		var mu sync.Mutex
		var wg sync.WaitGroup
		for name, check := range checks {
			wg.Go(func() {
				err := check()
				mu.Lock()
				defer mu.Unlock()
				errs[name] = err
			})
		}
		wg.Wait()
		for name, err := range errs {
			require.NoError(t, err, name)
		}
	})

	// The charge is held at Stripe past the server's write timeout (the
	// Stripe timeout is longer): the answer still arrives.
	t.Run("payment past the write timeout", func(t *testing.T) {
		t.Parallel()
		apiKey := s.rider(t, "patient@example.com")
		gate, fired := make(chan struct{}), make(chan struct{}, 1)
		s.stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultLatency, Gate: gate, Fired: fired, Times: 1})
		go func() {
			<-fired
			// The hold itself is what is tested: longer than the server
			// allows any route that does not extend its deadlines.
			time.Sleep(serverWriteTimeout + 5*time.Second)
			close(gate)
		}()
		req, err := http.NewRequest(http.MethodPost, s.base+"/rides",
			strings.NewReader(`{"origin_lat":1,"origin_lon":2,"target_lat":3,"target_lon":4}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+apiKey)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "patient-key-0000000000001")
		start := time.Now()
		resp := s.request(t, req)
		require.Equal(t, http.StatusCreated, resp.StatusCode, "logs:\n%s", s.logs.String())
		require.Greater(t, time.Since(start), serverWriteTimeout)
		require.Len(t, s.stripe.SucceededCharges(), 1)
	})
}

// rider creates a rider through the admin API and returns its API key.
func (s *servedBinary) rider(t *testing.T, email string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, s.base+"/users/"+email, strings.NewReader(`{"payment_source":"tok_visa"}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.adminToken)
	req.Header.Set("Content-Type", "application/json")
	resp := s.request(t, req)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	var created struct {
		APIKey string `json:"api_key"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&created))
	require.NotEmpty(t, created.APIKey)
	return created.APIKey
}

// dribbleCutOff announces a large body and sends it one byte a second: the
// server must end the connection within cutOffWithin, long before the body
// is complete.
func dribbleCutOff(addr, method, path string) error {
	const announced = 100_000
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	start := time.Now()
	if _, err := fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\n",
		method, path, addr, announced); err != nil {
		return err
	}

	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := conn.Write([]byte("a")); err != nil {
					return
				}
			}
		}
	}()

	if err := conn.SetReadDeadline(start.Add(cutOffWithin)); err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, conn)
	if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("the connection was still open after %s", cutOffWithin)
	}
	return nil
}

// idleClosed makes one request on a keep-alive connection, then leaves it
// idle: the server must close it within cutOffWithin.
func idleClosed(addr, path string) error {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, addr); err != nil {
		return err
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.Close {
		return errors.New("the server did not keep the connection alive")
	}
	if err := conn.SetReadDeadline(time.Now().Add(cutOffWithin)); err != nil {
		return err
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("the idle connection was not closed within %s: %v", cutOffWithin, err)
	}
	return nil
}
