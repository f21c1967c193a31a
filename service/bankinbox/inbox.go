package bankinbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
)

// CompleteSuffix ends the name of every complete settlement file; a file
// still being written ends in ".part".
const CompleteSuffix = ".csv"

// ErrTooLarge is a file larger than the limit given to Read.
var ErrTooLarge = errors.New("bankinbox: file too large")

// Inbox is one connection to the bank's inbox. It is not safe for
// concurrent use; Close it when done.
type Inbox struct {
	cfg  Config
	conn *ssh.Client
	sftp *sftp.Client
}

// File is a complete settlement file in the inbox.
type File struct {
	// Name is the file's name in the inbox.
	Name    string
	Size    int64
	ModTime time.Time
}

// Dial connects to the inbox, refusing a server whose host key is not
// cfg.HostKey. ctx bounds the connection and handshake only.
func Dial(ctx context.Context, cfg Config) (*Inbox, error) {
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.HostKey == nil || cfg.Signer == nil {
		return nil, errors.New("bankinbox: Config.HostKey and Config.Signer are required")
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("bankinbox: dial %s: %w", cfg.Addr, err)
	}
	deadline, _ := ctx.Deadline()
	_ = raw.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = raw.Close() })
	c, chans, reqs, err := ssh.NewClientConn(raw, cfg.Addr, &ssh.ClientConfig{
		User:              cfg.User,
		Auth:              []ssh.AuthMethod{ssh.PublicKeys(cfg.Signer)},
		HostKeyCallback:   ssh.FixedHostKey(cfg.HostKey),
		HostKeyAlgorithms: []string{cfg.HostKey.Type()},
		Timeout:           cfg.Timeout,
	})
	if !stop() || err != nil {
		_ = raw.Close()
		if err == nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("bankinbox: ssh handshake with %s: %w", cfg.Addr, err)
	}
	_ = raw.SetDeadline(time.Time{})
	conn := ssh.NewClient(c, chans, reqs)
	client, err := sftp.NewClient(conn)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("bankinbox: start sftp: %w", err)
	}
	return &Inbox{cfg: cfg, conn: conn, sftp: client}, nil
}

// Close ends the connection.
func (i *Inbox) Close() error {
	err := i.sftp.Close()
	return errors.Join(err, i.conn.Close())
}

// List returns the complete settlement files of the inbox, by name: regular
// files whose name ends in CompleteSuffix. Files still being written
// (".part") and anything else are left alone.
func (i *Inbox) List() ([]File, error) {
	infos, err := i.sftp.ReadDir(i.cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("bankinbox: list %s: %w", i.cfg.Dir, err)
	}
	var files []File
	for _, fi := range infos {
		if !fi.Mode().IsRegular() || !strings.HasSuffix(fi.Name(), CompleteSuffix) {
			continue
		}
		files = append(files, File{Name: fi.Name(), Size: fi.Size(), ModTime: fi.ModTime()})
	}
	sort.Slice(files, func(a, b int) bool { return files[a].Name < files[b].Name })
	return files, nil
}

// Read returns a file's content, or ErrTooLarge past limit bytes.
func (i *Inbox) Read(name string, limit int64) ([]byte, error) {
	f, err := i.sftp.Open(path.Join(i.cfg.Dir, name))
	if err != nil {
		return nil, fmt.Errorf("bankinbox: open %s: %w", name, err)
	}
	defer f.Close()
	var b bytes.Buffer
	n, err := io.Copy(&b, io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("bankinbox: read %s: %w", name, err)
	}
	if n > limit {
		return nil, fmt.Errorf("%w: %s is over %d bytes", ErrTooLarge, name, limit)
	}
	return b.Bytes(), nil
}

// ErrChanged is a file that changed in the inbox after it was listed: it
// is left in place for the next pass.
var ErrChanged = errors.New("bankinbox: file changed since it was listed")

// ArchiveName is where Archive moves a file with the given content.
func ArchiveName(name string, content []byte) string {
	sum := sha256.Sum256(content)
	return name + "." + hex.EncodeToString(sum[:6])
}

// Archive moves a recorded file to the archive folder (made when missing)
// as ArchiveName. A file whose size or modification time differ from f's
// (the bank replaced it since it was listed) is left for the next pass
// (ErrChanged), so that no unrecorded content is archived. Archiving a file
// twice, or a file already gone, is not an error.
func (i *Inbox) Archive(f File, content []byte) error {
	name := f.Name
	if fi, err := i.sftp.Stat(path.Join(i.cfg.Dir, name)); err == nil &&
		(fi.Size() != f.Size || !fi.ModTime().Equal(f.ModTime) || int64(len(content)) != f.Size) {
		return fmt.Errorf("%w: %s", ErrChanged, name)
	}
	dir := i.cfg.ArchiveDir()
	if err := i.sftp.MkdirAll(dir); err != nil {
		return fmt.Errorf("bankinbox: make %s: %w", dir, err)
	}
	from, to := path.Join(i.cfg.Dir, name), path.Join(dir, ArchiveName(name, content))
	err := i.sftp.PosixRename(from, to)
	if err != nil && errors.Is(err, os.ErrNotExist) {
		if _, statErr := i.sftp.Stat(to); statErr == nil {
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("bankinbox: archive %s: %w", name, err)
	}
	return nil
}
