//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package pgenv

import (
	"context"
	"errors"
	"io/fs"
	"os/exec"
)

var errUnsupported = errors.New("pgenv: throwaway clusters are supported on Unix only; set DATABASE_URL")

func setCredential(*exec.Cmd, int, int) {}

func fileUID(fs.FileInfo) (int, bool) { return 0, false }

func postmasterAlive(int, string) bool { return false }

func lockFile(context.Context, string) (func(), error) { return nil, errUnsupported }

func killServer(context.Context, int) error { return errUnsupported }
