package pgenv

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

const (
	stateFileName = "state.json" // in the cluster's state directory
	lockFileName  = "lock"       // flock'd while a cluster starts or stops
)

// clusterState is what a state directory remembers about its cluster: where
// its files live (they may have been relocated to the temp dir) and, while it
// runs, how to reach it. It is advisory: StartCluster trusts only the
// postmaster.pid of the data directory and a successful connection.
type clusterState struct {
	URL       string    `json:"url,omitempty"`
	PID       int       `json:"pid,omitempty"`
	Port      int       `json:"port,omitempty"`
	Root      string    `json:"root"`
	DataDir   string    `json:"data_dir"`
	BinDir    string    `json:"bin_dir,omitempty"`
	Account   string    `json:"account,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
}

// readState returns the state recorded in dir, or nil when there is none.
// An unreadable state file counts as none: it only saves work.
func readState(dir string) *clusterState {
	b, err := os.ReadFile(filepath.Join(dir, stateFileName))
	if err != nil {
		return nil
	}
	var st clusterState
	if json.Unmarshal(b, &st) != nil {
		return nil
	}
	return &st
}

// writeState replaces dir's state file atomically.
func writeState(dir string, st *clusterState) error {
	st.UpdatedAt = time.Now().UTC()
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, stateFileName+".*")
	if err != nil {
		return fmt.Errorf("pgenv: write state: %w", err)
	}
	_, werr := tmp.Write(append(b, '\n'))
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("pgenv: write state: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("pgenv: write state: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, stateFileName)); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("pgenv: write state: %w", err)
	}
	return nil
}
