package testkit

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is a redis-server started for one test, without persistence, on a
// free port of 127.0.0.1.
type Redis struct {
	// URL is its redis:// URL, the form of REDIS_URL.
	URL string
	// Addr is its host:port.
	Addr string
	cmd  *exec.Cmd
	done chan struct{}
}

// RedisServerPath returns the redis-server binary. Without one it fails t,
// in CI and out of it, and never skips.
func RedisServerPath(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("redis-server is missing in CI: .ci/run installs it (apt-get install redis-server); the shared rate-limit tests must run")
	}
	t.Fatal("redis-server is required for the shared rate-limit tests: install it with `sudo apt-get install -y --no-install-recommends redis-server` (.ci/run does)")
	return ""
}

// NewRedis starts a redis-server for t and waits until it answers PING. It
// is killed when t ends, if the test did not kill it first.
func NewRedis(t testing.TB) *Redis {
	t.Helper()
	bin := RedisServerPath(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatalf("redis-server: %v", err)
	}
	r := &Redis{URL: "redis://" + addr + "/0", Addr: addr, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(r.done) }()
	t.Cleanup(r.Kill)

	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer client.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := client.Ping(ctx).Err()
		cancel()
		if err == nil {
			return r
		}
		select {
		case <-r.done:
			t.Fatalf("redis-server on %s exited: %v", addr, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s does not answer: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill kills the server and waits until it has exited.
func (r *Redis) Kill() {
	_ = r.cmd.Process.Kill()
	<-r.done
}
