package sftpserver

import (
	"bufio"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// Server is one running sshd serving SFTP on loopback. Everything it made
// ends with the test.
type Server struct {
	// Addr is the server's host:port on loopback.
	Addr string
	// User is the SSH user (the user running the test).
	User string
	// Inbox is the absolute path of the bank's inbox directory.
	Inbox string
	// HostKey is the server's public host key, and HostKeyLine the same in
	// the authorized_keys format (SETTLEMENT_SFTP_HOST_KEY).
	HostKey     ssh.PublicKey
	HostKeyLine string
	// KeyFile is the path of the client's private key file
	// (SETTLEMENT_SFTP_KEY_FILE), and Signer the same key.
	KeyFile string
	Signer  ssh.Signer
}

// URL is the inbox's SETTLEMENT_SFTP_URL.
func (s *Server) URL() string { return "sftp://" + s.User + "@" + s.Addr + s.Inbox }

// startTimeout bounds sshd's start.
const startTimeout = 30 * time.Second

// Start runs sshd for t and returns once it listens.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := sshdPath()
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("sftpserver: sshd is not installed (apt-get install openssh-server)")
		}
		t.Skip("sftpserver: sshd is not installed (apt-get install openssh-server)")
	}
	u, err := user.Current()
	if err != nil {
		t.Fatalf("sftpserver: current user: %v", err)
	}
	if os.Getuid() == 0 {
		// sshd running as root checks for its privilege separation
		// directory, which Debian makes only when it starts the service.
		if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
			t.Fatalf("sftpserver: %v", err)
		}
	}
	dir := t.TempDir()
	s := &Server{User: u.Username, Inbox: filepath.Join(dir, "inbox")}
	if err := os.MkdirAll(s.Inbox, 0o755); err != nil {
		t.Fatal(err)
	}
	hostKeyFile := filepath.Join(dir, "host_ed25519")
	s.HostKey = writeKey(t, hostKeyFile)
	s.HostKeyLine = strings.TrimSpace(string(ssh.MarshalAuthorizedKey(s.HostKey)))
	s.KeyFile = filepath.Join(dir, "client_ed25519")
	clientKey := writeKey(t, s.KeyFile)
	s.Signer = loadSigner(t, s.KeyFile)
	authorized := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(authorized, ssh.MarshalAuthorizedKey(clientKey), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	config := filepath.Join(dir, "sshd_config")
	// StrictModes is off because the test's files live under /tmp, which
	// is world-writable; the files themselves are the test's own.
	conf := fmt.Sprintf(`ListenAddress 127.0.0.1
HostKey %s
AuthorizedKeysFile %s
PidFile none
StrictModes no
UsePAM no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
AllowUsers %s
Subsystem sftp internal-sftp
LogLevel INFO
`, hostKeyFile, authorized, s.User)
	if err := os.WriteFile(config, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-D", "-e", "-f", config, "-p", strconv.Itoa(port))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("sftpserver: start sshd: %v", err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	ready := make(chan error, 1)
	go func() {
		defer close(done)
		defer func() { _ = cmd.Wait() }()
		sc := bufio.NewScanner(stderr)
		var log []string
		listening := false
		for sc.Scan() {
			line := sc.Text()
			if !listening {
				log = append(log, line)
				if strings.Contains(line, "Server listening on") {
					listening = true
					ready <- nil
				}
			}
		}
		if !listening {
			ready <- fmt.Errorf("sshd exited before listening:\n%s", strings.Join(log, "\n"))
		}
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("sftpserver: %v", err)
		}
	case <-time.After(startTimeout):
		t.Fatalf("sftpserver: sshd did not listen within %s", startTimeout)
	}
	return s
}

// Put writes a complete file into the inbox the way the bank does: as
// "<name>.part", renamed to name once written.
func (s *Server) Put(t testing.TB, name string, content []byte) {
	t.Helper()
	s.PutPart(t, name, content)
	s.Complete(t, name)
}

// PutPart writes "<name>.part" into the inbox: a file still being written.
func (s *Server) PutPart(t testing.TB, name string, content []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(s.Inbox, name+".part"), content, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Complete renames "<name>.part" to name, as the bank does when a file is
// written.
func (s *Server) Complete(t testing.TB, name string) {
	t.Helper()
	if err := os.Rename(filepath.Join(s.Inbox, name+".part"), filepath.Join(s.Inbox, name)); err != nil {
		t.Fatal(err)
	}
}

// InboxNames lists the names in the inbox, and ArchiveNames those in its
// archive folder.
func (s *Server) InboxNames(t testing.TB) []string { return names(t, s.Inbox) }

// ArchiveNames lists the names in the archive folder.
func (s *Server) ArchiveNames(t testing.TB) []string {
	return names(t, filepath.Join(s.Inbox, "archive"))
}

func names(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.Type().IsRegular() {
			out = append(out, e.Name())
		}
	}
	return out
}

// sshdPath finds sshd; sshd insists on being started by its absolute path.
func sshdPath() string {
	if p, err := exec.LookPath("sshd"); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			return abs
		}
	}
	for _, p := range []string{"/usr/sbin/sshd", "/usr/local/sbin/sshd"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// writeKey writes a new ed25519 private key to file in OpenSSH's format and
// returns its public key.
func writeKey(t testing.TB, file string) ssh.PublicKey {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	key, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// NewKey returns a fresh public key in the authorized_keys format: a host
// key that no server presents.
func NewKey(t testing.TB) string {
	t.Helper()
	key := writeKey(t, filepath.Join(t.TempDir(), "other_ed25519"))
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key)))
}

func loadSigner(t testing.TB, file string) ssh.Signer {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.ParsePrivateKey(b)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
