package pgenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// DefaultDirName is the directory, relative to the project root, that holds
// the throwaway cluster's state (and, when the PostgreSQL account can reach
// it, the cluster itself). It is not meant to be committed.
const DefaultDirName = ".pgdata"

// FindProjectRoot returns the nearest directory at or above start that holds
// a go.mod file. An empty start means the working directory.
func FindProjectRoot(start string) (string, error) {
	if start == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("pgenv: find project root: %w", err)
		}
		start = wd
	}
	dir, err := filepath.Abs(start)
	if err != nil {
		return "", fmt.Errorf("pgenv: find project root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("pgenv: find project root: %w", err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("pgenv: no go.mod at or above %s", start)
		}
		dir = parent
	}
}
