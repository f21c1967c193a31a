// Package bankinbox is the adapter over the bank's SFTP server (pkg/sftp
// over x/crypto/ssh): it lists the settlement files that are complete in
// the inbox, reads them, and moves them to the archive folder once they are
// recorded. It is the only importer of pkg/sftp.
//
// The convention it relies on, which the bank documents for its uploads:
// a file is written as "<name>.part" and renamed to "<name>" (ending in
// ".csv") once complete, so a name ending in ".csv" is always whole.
// Processed files move to "archive/" under the inbox, named
// "<name>.<first 12 hex digits of its SHA-256>" so that two versions of one
// name never collide.
//
// The server's host key is pinned: a server presenting any other key is
// refused before authentication.
package bankinbox
