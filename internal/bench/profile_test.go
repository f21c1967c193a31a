package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/atomicrides/atomicrides/internal/binrun"
)

// profileSeq numbers the CPU profiles of one benchmark process.
var profileSeq atomic.Int64

// pprofEnv is the environment that makes a serve process serve its runtime
// profiles (PPROF_ADDR on a free loopback port), and that address as a URL;
// nothing unless the run profiles (benchConfig.CPUProfile).
func (e *benchEnv) pprofEnv(tb testing.TB) (env []string, base string) {
	tb.Helper()
	if !e.cfg.CPUProfile {
		return nil, ""
	}
	addr := binrun.FreeAddr(tb)
	return []string{"PPROF_ADDR=" + addr}, "http://" + addr
}

// serverProfile is a CPU profile of a serve process being recorded over one
// measured run.
type serverProfile struct {
	path string
	done chan error
}

// startServerProfile starts recording srv's CPU profile for the length of a
// measured run (e.cfg.Duration) into cpu-NNN-cCLIENTS.pprof in OutDir, when
// the run profiles; it returns nil otherwise. The profile is taken through
// the server's PPROF_ADDR, as an operator would take one.
func (e *benchEnv) startServerProfile(tb testing.TB, srv *servingProcess, clients int) *serverProfile {
	tb.Helper()
	if srv.pprofBase == "" {
		return nil
	}
	p := &serverProfile{
		path: filepath.Join(e.cfg.OutDir, fmt.Sprintf("cpu-%03d-c%d.pprof", profileSeq.Add(1), clients)),
		done: make(chan error, 1),
	}
	url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", srv.pprofBase, int(e.cfg.Duration.Seconds()))
	go func() { p.done <- fetchProfile(url, p.path) }()
	return p
}

// finish waits for the profile and fails tb if it could not be written.
func (p *serverProfile) finish(tb testing.TB) {
	tb.Helper()
	if p == nil {
		return
	}
	if err := <-p.done; err != nil {
		tb.Fatalf("CPU profile %s: %v", p.path, err)
	}
}

func fetchProfile(url, path string) error {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
