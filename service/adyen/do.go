package adyen

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/atomicrides/atomicrides/service"

	"github.com/atomicrides/atomicrides/internal/telemetry"
)

// maxResponseBytes bounds what is read of an answer.
const maxResponseBytes = 1 << 20

// IdempotencyKey is the Idempotency-Key the client sends for the caller's
// key: the key itself when it fits Adyen's 64 characters, else its first
// six characters (the service's prefix, e.g. "ar-ch-") and a SHA-256 digest
// of the whole key — a pure function of the key, so a retry sends the same
// header.
func IdempotencyKey(key string) string {
	if len(key) <= maxIdempotencyKeyLen {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return (key[:6] + hex.EncodeToString(sum[:]))[:maxIdempotencyKeyLen]
}

// reply is one answer of the API.
type reply struct {
	status int
	body   []byte
}

// post sends body to path under the idempotency key, retrying what may be
// retried, and decodes a 2xx answer into out. Any other outcome is a
// *service.PaymentError (see classify); op names the operation for it.
func (c *Client) post(ctx context.Context, op, path, key string, body, out any) error {
	if key == "" {
		return &service.PaymentError{
			Class: service.PaymentClassConfiguration, Kind: service.PaymentUnavailable,
			Message: ErrMissingIdempotencyKey.Error(), Err: ErrMissingIdempotencyKey,
		}
	}
	payload, err := json.Marshal(body)
	if err != nil {
		return unavailable("encode "+op+": "+err.Error(), 0, err)
	}
	ctx, cancel := context.WithTimeout(telemetry.WithAttempts(ctx), c.budget)
	defer cancel()
	var (
		rep     reply
		sendErr error
	)
	for attempt := int64(0); ; attempt++ {
		rep, sendErr = c.send(ctx, path, IdempotencyKey(key), payload)
		if !retryable(rep, sendErr) || attempt >= c.retries || ctx.Err() != nil {
			break
		}
		t := time.NewTimer(jittered(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		if ctx.Err() != nil {
			break
		}
	}
	if sendErr != nil {
		return unavailable(op+": "+sendErr.Error(), 0, sendErr)
	}
	if rep.status/100 != 2 {
		return classify(op, rep)
	}
	if err := json.Unmarshal(rep.body, out); err != nil {
		return unavailable(fmt.Sprintf("%s: undecodable answer: %v", op, err), rep.status, err)
	}
	return nil
}

// send makes one attempt.
func (c *Client) send(ctx context.Context, path, key string, payload []byte) (reply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(c.base, "/")+path, bytes.NewReader(payload))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("X-API-Key", c.key)
	req.Header.Set("Idempotency-Key", key)
	resp, err := c.http.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return reply{}, err
	}
	return reply{status: resp.StatusCode, body: b}, nil
}

// retryable reports whether an attempt may be sent again with its key: no
// answer, or an answer saying the request was not taken on (409: the key is
// in use; 429; 5xx).
func retryable(rep reply, err error) bool {
	if err != nil {
		return !errors.Is(err, context.Canceled)
	}
	return rep.status == http.StatusConflict || rep.status == http.StatusTooManyRequests || rep.status >= 500
}

// configurationCodes are Adyen errorCodes that name the service's own
// configuration (the merchant account, the credential's roles), never the
// rider's card.
var configurationCodes = map[string]bool{
	"901": true, // invalid merchant account
	"905": true, // payment details are not supported / not configured
	"000": true, // unknown error, usually a credential without the role
}

// errorCodeIdempotency is Adyen's errorCode for an idempotency key in use
// or already used with another request.
const errorCodeIdempotency = "704"

// classify turns an answer other than 2xx into a *service.PaymentError:
//
//   - 409 (the key is being processed), 429 and 5xx are unavailable: the
//     request may or may not have taken effect;
//   - 401 and 403 (the API key refused or lacking a role), and a 4xx with
//     one of the errorCodes of configurationCodes, are configuration
//     errors: never the rider's outcome, indeterminate, retried once an
//     operator acts;
//   - errorCode 704 (the key already used with another request) is the
//     configuration error service.PaymentCodeIdempotencyMismatch;
//   - any other 4xx is a refusal of the request, final: for a stored card
//     (op "store") its Code is service.PaymentCodeSourceRefused, the rider's
//     card refused at registration.
func classify(op string, rep reply) error {
	var se serviceError
	_ = json.Unmarshal(rep.body, &se)
	msg := se.Message
	if msg == "" {
		msg = http.StatusText(rep.status)
	}
	pe := &service.PaymentError{
		Code:       se.ErrorCode,
		Message:    msg,
		HTTPStatus: rep.status,
		Err:        fmt.Errorf("adyen %s: %d %s: %s", op, rep.status, se.ErrorCode, msg),
	}
	switch s := rep.status; {
	case s == http.StatusConflict, s == http.StatusTooManyRequests, s >= 500:
		pe.Class, pe.Kind = service.PaymentClassUnavailable, service.PaymentUnavailable
	case s == http.StatusUnauthorized, s == http.StatusForbidden, configurationCodes[se.ErrorCode]:
		pe.Class, pe.Kind = service.PaymentClassConfiguration, service.PaymentUnavailable
	case se.ErrorCode == errorCodeIdempotency:
		// The key was sent before with another request: ours never do
		// (every parameter is a function of the key's inputs), so it is
		// the service's problem, never the rider's card refused.
		pe.Class, pe.Kind = service.PaymentClassConfiguration, service.PaymentUnavailable
		pe.Code = service.PaymentCodeIdempotencyMismatch
	case s >= 400:
		pe.Class, pe.Kind = service.PaymentClassRefusal, service.PaymentInvalid
		if op == opStore {
			pe.Code = service.PaymentCodeSourceRefused
		}
	default:
		pe.Class, pe.Kind = service.PaymentClassUnavailable, service.PaymentUnavailable
	}
	return pe
}

// unavailable is the error of a call whose effect is unknown.
func unavailable(message string, status int, err error) *service.PaymentError {
	return &service.PaymentError{
		Class: service.PaymentClassUnavailable, Kind: service.PaymentUnavailable,
		Message: message, HTTPStatus: status, Err: err,
	}
}
