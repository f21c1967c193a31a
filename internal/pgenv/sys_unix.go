//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package pgenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

func setCredential(cmd *exec.Cmd, uid, gid int) {
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)},
	}
}

func fileUID(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}

// postmasterAlive reports whether pid is a live (not zombie) process that,
// where /proc tells, is a postgres working in dataDir (a postmaster's
// working directory is its data directory; an empty dataDir skips that
// check). A postmaster reparented to an init that does not reap stays a
// zombie after it exits; that counts as gone. So does a pid reused, after a
// crash or a reboot, by another process. When in doubt it says alive.
func postmasterAlive(pid int, dataDir string) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return !errors.Is(err, os.ErrNotExist) || !procMounted()
	}
	// "pid (comm) S ...": comm may hold spaces and parentheses, so look
	// after the last ')'.
	open, end := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
	if open < 0 || end < open || end+2 >= len(stat) {
		return true
	}
	comm, state := string(stat[open+1:end]), stat[end+2]
	if state == 'Z' || state == 'X' || comm != "postgres" {
		return false
	}
	if dataDir == "" {
		return true
	}
	cwd, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd")
	if err != nil {
		return true // not ours to inspect
	}
	if real, err := filepath.EvalSymlinks(dataDir); err == nil {
		dataDir = real
	}
	return cwd == dataDir
}

func procMounted() bool {
	_, err := os.Stat("/proc/self/stat")
	return err == nil
}

// lockFile takes an exclusive flock on path, polling until ctx ends; the
// returned func releases it. The kernel releases it too if the process dies,
// so a crashed starter never wedges the next one.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("pgenv: open lock %s: %w", path, err)
	}
	delay := 5 * time.Millisecond
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				_ = f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			_ = f.Close()
			return nil, fmt.Errorf("pgenv: lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("pgenv: wait for lock %s (another process is starting or stopping the cluster): %w", path, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(2*delay, 200*time.Millisecond)
	}
}

// killServer SIGKILLs the postmaster pid and every process it forked, as
// the loss of the machine would end them, and waits until all are gone.
// The postmaster is stopped first, so that it forks nothing while its
// children are listed (each child is a session leader of its own, out of
// reach of a signal to the postmaster's group).
func killServer(ctx context.Context, pid int) error {
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("pgenv: stop postmaster %d: %w", pid, err)
	}
	procs := append(childPIDs(pid), pid)
	for _, p := range procs {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	deadline := time.Now().Add(readyTimeout)
	for _, p := range procs {
		for delay := time.Millisecond; postmasterAlive(p, ""); delay = min(2*delay, 50*time.Millisecond) {
			if time.Now().After(deadline) {
				return fmt.Errorf("pgenv: process %d of postmaster %d still runs %s after SIGKILL", p, pid, readyTimeout)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(delay):
			}
		}
	}
	return nil
}

// childPIDs lists the processes whose parent is pid, from /proc (none
// where /proc is missing: the postmaster's children then exit on their
// own once they notice it died).
func childPIDs(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// "pid (comm) S ppid ...": look after the last ')'.
		end := bytes.LastIndexByte(stat, ')')
		if end < 0 {
			continue
		}
		fields := bytes.Fields(stat[end+1:])
		if len(fields) >= 2 && string(fields[1]) == strconv.Itoa(pid) {
			out = append(out, p)
		}
	}
	return out
}
