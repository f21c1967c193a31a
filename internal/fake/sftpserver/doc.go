// Package sftpserver runs a real SFTP server for tests: OpenSSH's sshd with
// its internal-sftp subsystem, on a loopback port, with a throwaway host key
// and a throwaway user key, serving the test's own directories as the
// bank's inbox.
//
// sshd must be installed (Debian's openssh-server); .ci/run installs it.
// Without it a test is skipped, except under CI (CI=true), where it fails.
package sftpserver
