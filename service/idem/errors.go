package idem

import (
	"errors"
	"fmt"
	"time"
)

// ErrKeyReused: the key was used before with another request (another
// method, path or body). Nothing was done.
var ErrKeyReused = errors.New("idem: this idempotency key was already used with a different request")

// ErrLeaseLost: another request took the key over while this one worked
// (its lease had expired); this one stopped without writing. The key is
// in use: the caller answers as for a KeyInUseError.
var ErrLeaseLost = errors.New("idem: idempotency key lease lost")

// ErrKeyNotFound: Complete was asked for a key that does not exist.
var ErrKeyNotFound = errors.New("idem: no such idempotency key")

// KeyInUseError: another request holds the key's lease. Nothing was done;
// the request may be retried after RetryAfter.
type KeyInUseError struct {
	RetryAfter time.Duration
}

func (e *KeyInUseError) Error() string {
	return fmt.Sprintf("idem: another request with this idempotency key is in progress; retry after %s", e.RetryAfter)
}
