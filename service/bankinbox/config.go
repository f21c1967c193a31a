package bankinbox

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path"
	"time"

	"golang.org/x/crypto/ssh"
)

// DefaultTimeout bounds dialling and the SSH handshake.
const DefaultTimeout = 30 * time.Second

// Config says where the inbox is and how to reach it.
type Config struct {
	// Addr is the server's host:port.
	Addr string
	// User is the SSH user.
	User string
	// Dir is the inbox's absolute path on the server.
	Dir string
	// HostKey is the server's pinned public host key.
	HostKey ssh.PublicKey
	// Signer is the client's private key.
	Signer ssh.Signer
	// Timeout bounds dialling and the handshake. Default DefaultTimeout.
	Timeout time.Duration
}

// ArchiveDir is where processed files go, under the inbox.
func (c Config) ArchiveDir() string { return path.Join(c.Dir, "archive") }

// ParseURL reads an inbox URL, sftp://user@host[:port]/absolute/path (port
// 22 by default), into c's Addr, User and Dir.
func (c *Config) ParseURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a URL")
	}
	switch {
	case u.Scheme != "sftp":
		return errors.New("the scheme must be sftp")
	case u.User == nil || u.User.Username() == "":
		return errors.New("a user is required (sftp://user@host/path)")
	case u.Hostname() == "":
		return errors.New("a host is required")
	case u.Path == "" || u.Path == "/":
		return errors.New("the inbox path is required (sftp://user@host/path)")
	case u.RawQuery != "" || u.Fragment != "":
		return errors.New("a query or fragment is not allowed")
	}
	if _, hasPassword := u.User.Password(); hasPassword {
		return errors.New("a password is not allowed: the client authenticates with its key file")
	}
	port := u.Port()
	if port == "" {
		port = "22"
	}
	c.Addr = net.JoinHostPort(u.Hostname(), port)
	c.User = u.User.Username()
	c.Dir = path.Clean(u.Path)
	return nil
}

// ParseHostKey reads a public key in the authorized_keys format
// ("ssh-ed25519 AAAA… [comment]"), as ssh-keyscan or the server's
// /etc/ssh/ssh_host_*_key.pub print it.
func ParseHostKey(line string) (ssh.PublicKey, error) {
	key, _, _, rest, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		return nil, errors.New("not a public key like \"ssh-ed25519 AAAA…\"")
	}
	if len(rest) != 0 {
		return nil, errors.New("more than one key")
	}
	return key, nil
}

// LoadSigner reads an unencrypted private key file (OpenSSH or PEM).
func LoadSigner(file string) (ssh.Signer, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("cannot read it: %w", errors.Unwrap(err))
	}
	s, err := ssh.ParsePrivateKey(b)
	if err != nil {
		var missing *ssh.PassphraseMissingError
		if errors.As(err, &missing) {
			return nil, errors.New("the key is encrypted; an unencrypted key is required")
		}
		return nil, errors.New("not a private key")
	}
	return s, nil
}
