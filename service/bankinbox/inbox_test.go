package bankinbox_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/sftpserver"
	"github.com/atomicrides/atomicrides/service/bankinbox"
)

func config(t *testing.T, srv *sftpserver.Server, hostKey string) bankinbox.Config {
	t.Helper()
	var cfg bankinbox.Config
	require.NoError(t, cfg.ParseURL(srv.URL()))
	key, err := bankinbox.ParseHostKey(hostKey)
	require.NoError(t, err)
	cfg.HostKey = key
	cfg.Signer, err = bankinbox.LoadSigner(srv.KeyFile)
	require.NoError(t, err)
	return cfg
}

func TestInboxListsOnlyCompleteFilesAndArchives(t *testing.T) {
	t.Parallel()
	srv := sftpserver.Start(t)
	srv.Put(t, "settlement_001.csv", []byte("one"))
	srv.PutPart(t, "settlement_002.csv", []byte("tw"))
	inbox, err := bankinbox.Dial(context.Background(), config(t, srv, srv.HostKeyLine))
	require.NoError(t, err)
	defer inbox.Close()

	files, err := inbox.List()
	require.NoError(t, err)
	require.Len(t, files, 1, "the .part file is still being written")
	require.Equal(t, "settlement_001.csv", files[0].Name)
	content, err := inbox.Read(files[0].Name, 1<<20)
	require.NoError(t, err)
	require.Equal(t, "one", string(content))
	_, err = inbox.Read(files[0].Name, 2)
	require.ErrorIs(t, err, bankinbox.ErrTooLarge)

	require.NoError(t, inbox.Archive(files[0], content))
	require.NoError(t, inbox.Archive(files[0], content), "archiving twice is not an error")
	require.Equal(t, []string{bankinbox.ArchiveName("settlement_001.csv", []byte("one"))}, srv.ArchiveNames(t))

	srv.Complete(t, "settlement_002.csv")
	files, err = inbox.List()
	require.NoError(t, err)
	require.Len(t, files, 1)
	require.Equal(t, "settlement_002.csv", files[0].Name)
}

func TestInboxRefusesAWrongHostKey(t *testing.T) {
	t.Parallel()
	srv := sftpserver.Start(t)
	_, err := bankinbox.Dial(context.Background(), config(t, srv, sftpserver.NewKey(t)))
	require.ErrorContains(t, err, "host key mismatch")
}

func TestConfigParseURL(t *testing.T) {
	t.Parallel()
	var cfg bankinbox.Config
	require.NoError(t, cfg.ParseURL("sftp://bank@sftp.example.com/in/settlements/"))
	require.Equal(t, "sftp.example.com:22", cfg.Addr)
	require.Equal(t, "bank", cfg.User)
	require.Equal(t, "/in/settlements", cfg.Dir)
	require.Equal(t, "/in/settlements/archive", cfg.ArchiveDir())
	for _, bad := range []string{"http://u@h/p", "sftp://h/p", "sftp://u@h", "sftp://u:pw@h/p", "sftp://u@h/p?x=1"} {
		require.Error(t, cfg.ParseURL(bad), bad)
	}
}
