package pgenv

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"time"
)

// account is the OS account that owns a throwaway cluster and runs initdb,
// pg_ctl and postgres. A nil *account is the current user; it is non-nil only
// when running as root, which PostgreSQL refuses.
type account struct {
	name     string
	uid, gid int
}

// clusterAccount picks the account to run PostgreSQL as: nil unless the
// effective user is root, then "postgres" if it exists, else "nobody".
func clusterAccount() (*account, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.Atoi(u.Uid)
		gid, err2 := strconv.Atoi(u.Gid)
		if err1 != nil || err2 != nil {
			continue
		}
		return &account{name: name, uid: uid, gid: gid}, nil
	}
	return nil, fmt.Errorf("pgenv: running as root, which PostgreSQL refuses, and there is neither a postgres nor a nobody account to run it as (create one: useradd --system postgres)")
}

func (a *account) String() string {
	if a == nil {
		return "the current user"
	}
	return a.name
}

// command prepares name to run as the account, in dir, under the C locale
// (so that initdb's locale checks cannot fail on an odd LANG). Output that
// the caller does not capture is discarded, never inherited: a postmaster
// holding our stdout open would keep `go test` waiting for it.
func (a *account) command(ctx context.Context, dir, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LANG=C")
	cmd.WaitDelay = 10 * time.Second
	if a != nil {
		setCredential(cmd, a.uid, a.gid)
	}
	return cmd
}

// chownAll gives everything under dir to the account.
func (a *account) chownAll(dir string) error {
	if a == nil {
		return nil
	}
	return filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, a.uid, a.gid)
	})
}

// canUse reports whether the account can reach dir and write in it; the
// kernel decides (ACLs included), by running test(1) as the account.
func (a *account) canUse(ctx context.Context, dir string) bool {
	if a == nil {
		return true
	}
	cmd := a.command(ctx, "/", "/bin/sh", "-c", `test -d "$1" && test -w "$1" && test -x "$1"`, "sh", dir)
	return cmd.Run() == nil
}

// owns reports whether fi belongs to the account (or, for nil, to us).
func (a *account) owns(fi fs.FileInfo) bool {
	uid, ok := fileUID(fi)
	if !ok {
		return true // no ownership information on this system
	}
	if a == nil {
		return uid == os.Geteuid()
	}
	return uid == a.uid
}
