package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// defaultHealthcheckTimeout bounds one healthcheck request: a container
// runtime runs the check every few seconds, so it must not hang.
const defaultHealthcheckTimeout = 5 * time.Second

// healthcheck asks the instance serving on ADDR whether it is ready (GET
// /readyz on the loopback interface) and fails unless it answers 200. It is
// the image's HEALTHCHECK: a scratch image has no curl, so the binary checks
// itself.
func healthcheck(ctx context.Context, args []string, stdout io.Writer) error {
	cmd := newCommand("healthcheck", "healthcheck [-timeout DURATION]\n\nAsks the instance serving on ADDR (on this machine) whether it is ready:\nGET http://127.0.0.1:PORT/readyz. Exits 0 when it answers 200, 1 otherwise.\nThe container image runs it as its HEALTHCHECK.", stdout)
	timeout := cmd.fs.Duration("timeout", defaultHealthcheckTimeout, "give up after this long")
	if err := cmd.parse(args, 0); err != nil {
		return err
	}
	if *timeout <= 0 {
		return usagef("healthcheck: -timeout %s: want a positive duration, e.g. 3s", *timeout)
	}
	cfg, err := configFromEnv(backends{})
	if err != nil {
		return err
	}
	url, err := readyzURL(cfg.Addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: GET %s: %s", url, resp.Status)
	}
	return nil
}

// readyzURL is the URL of /readyz of an instance listening on addr, as seen
// from the same machine: an unspecified host (":8080", "0.0.0.0:8080",
// "[::]:8080") is reached on 127.0.0.1.
func readyzURL(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", &configError{name: "ADDR", msg: fmt.Sprintf("%q is not a listen address", addr)}
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/readyz", nil
}
