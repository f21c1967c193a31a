package fakebank

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
)

// SFTPServer serves one directory tree over SFTP on loopback with pkg/sftp's
// server over x/crypto/ssh, for serve -dev: a stand-in for the bank's SFTP
// server on a machine without sshd. It accepts one user, one client key.
type SFTPServer struct {
	// Addr is where it listens.
	Addr string
	// User is the one user it accepts.
	User string
	// HostKey is its public host key.
	HostKey ssh.PublicKey
	// ClientSigner is the one client key it accepts.
	ClientSigner ssh.Signer

	ln     net.Listener
	logger *slog.Logger
	wg     sync.WaitGroup
}

// ServeSFTP starts an SFTP server on a free loopback port with a fresh host
// key and a fresh client key. Close stops it.
func ServeSFTP(logger *slog.Logger) (*SFTPServer, error) {
	host, err := newSigner()
	if err != nil {
		return nil, err
	}
	client, err := newSigner()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &SFTPServer{
		Addr: ln.Addr().String(), User: "bank", HostKey: host.PublicKey(), ClientSigner: client,
		ln: ln, logger: logger,
	}
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if meta.User() == s.User && string(key.Marshal()) == string(client.PublicKey().Marshal()) {
				return &ssh.Permissions{}, nil
			}
			return nil, fmt.Errorf("fakebank sftp: unknown key for %q", meta.User())
		},
	}
	cfg.AddHostKey(host)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.serveConn(conn, cfg)
			}()
		}
	}()
	return s, nil
}

// Close stops accepting connections and waits for the open ones to end.
func (s *SFTPServer) Close() error {
	err := s.ln.Close()
	s.wg.Wait()
	return err
}

func (s *SFTPServer) serveConn(conn net.Conn, cfg *ssh.ServerConfig) {
	defer conn.Close()
	sc, chans, reqs, err := ssh.NewServerConn(conn, cfg)
	if err != nil {
		s.logger.Debug("fakebank sftp: handshake", "err", err)
		return
	}
	defer sc.Close()
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only sessions")
			continue
		}
		ch, requests, err := nc.Accept()
		if err != nil {
			return
		}
		go func() {
			for req := range requests {
				ok := req.Type == "subsystem" && len(req.Payload) >= 4 && string(req.Payload[4:]) == "sftp"
				_ = req.Reply(ok, nil)
			}
		}()
		srv, err := sftp.NewServer(ch)
		if err != nil {
			_ = ch.Close()
			return
		}
		if err := srv.Serve(); err != nil && !errors.Is(err, net.ErrClosed) {
			s.logger.Debug("fakebank sftp: session", "err", err)
		}
		_ = srv.Close()
	}
}

func newSigner() (ssh.Signer, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	return ssh.NewSignerFromKey(priv)
}
