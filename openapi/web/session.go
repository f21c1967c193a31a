package web

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/atomicrides/atomicrides/service"
)

// The booking pages' session: the rider's API key in a cookie that only
// /book pages receive, that scripts cannot read and that no other site can
// make the browser send.
const (
	sessionCookie = "atomicrides_book"
	sessionMaxAge = 8 * time.Hour
)

// session is a signed-in rider of the booking pages.
type session struct {
	user *service.User
	// csrf is the token the session's forms carry.
	csrf string
}

// errNoSession means that the request carries no valid session cookie.
var errNoSession = errors.New("not signed in")

// csrfSecret keys the forms' CSRF tokens. It derives from the configured
// secret, so that every process sharing it accepts the others' forms;
// without one it is random to this Pages.
func csrfSecret(secret string) []byte {
	if secret == "" {
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		return b
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("atomic-rides booking pages: CSRF"))
	return m.Sum(nil)
}

// csrfToken is the session's token: an HMAC of its cookie under the server's
// secret. A page of another origin can neither read it nor compute it.
func (wb *Pages) csrfToken(cookie string) string {
	m := hmac.New(sha256.New, wb.secret)
	m.Write([]byte(cookie))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// session returns the signed-in rider, errNoSession, or an internal error.
// A cookie whose key no longer authenticates is cleared.
func (wb *Pages) session(w http.ResponseWriter, r *http.Request) (*session, error) {
	c, err := r.Cookie(sessionCookie)
	if err != nil || c.Value == "" {
		return nil, errNoSession
	}
	user, err := wb.svc.Authenticate(r.Context(), c.Value)
	if err != nil {
		if service.ErrorCode(err) == service.CodeUnauthenticated {
			clearSessionCookie(w, r)
			return nil, errNoSession
		}
		return nil, err
	}
	return &session{user: user, csrf: wb.csrfToken(c.Value)}, nil
}

// checkForm accepts a state-changing form post of s: from this origin, with
// the session's CSRF token.
func (wb *Pages) checkForm(r *http.Request, s *session) error {
	if err := wb.sameOrigin(r); err != nil {
		return err
	}
	if !hmac.Equal([]byte(r.PostFormValue("csrf_token")), []byte(s.csrf)) {
		return errors.New("the form's CSRF token does not match the session")
	}
	return nil
}

// sameOrigin refuses requests that a browser marks as coming from another
// origin (Sec-Fetch-Site, Origin) and, failing those headers, a Referer of
// another host.
func (wb *Pages) sameOrigin(r *http.Request) error {
	if err := wb.cop.Check(r); err != nil {
		return err
	}
	if r.Header.Get("Sec-Fetch-Site") == "" && r.Header.Get("Origin") == "" {
		if ref := r.Header.Get("Referer"); ref != "" {
			u, err := url.Parse(ref)
			if err != nil || u.Host != r.Host {
				return errors.New("cross-origin request: Referer of another host")
			}
		}
	}
	return nil
}

func setSessionCookie(w http.ResponseWriter, r *http.Request, apiKey string) {
	http.SetCookie(w, &http.Cookie{
		Name:     sessionCookie,
		Value:    apiKey,
		Path:     "/book",
		MaxAge:   int(sessionMaxAge / time.Second),
		HttpOnly: true,
		Secure:   r.TLS != nil,
		SameSite: http.SameSiteStrictMode,
	})
}

func clearSessionCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{
		Name:     sessionCookie,
		Path:     "/book",
		MaxAge:   -1,
		HttpOnly: true,
		Secure:   r.TLS != nil,
		SameSite: http.SameSiteStrictMode,
	})
}
