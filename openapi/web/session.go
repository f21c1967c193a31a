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
	"github.com/atomicrides/atomicrides/service/accounts"
)

// The booking pages' session: a random session id (accounts.Service.BookingSessionCreate)
// in a cookie that only /book pages receive, that scripts cannot read and
// that no other site can make the browser send. The cookie never holds the
// API key. The browser keeps it for the session's absolute lifetime; the
// service ends it sooner when unused, at sign-out, or with its API key.
const sessionCookie = "atomicrides_book"

// session is a signed-in rider of the booking pages.
type session struct {
	// id is the session's id, the cookie's value.
	id   string
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
// A cookie whose session has ended is cleared.
func (wb *Pages) session(w http.ResponseWriter, r *http.Request) (*session, error) {
	c, err := r.Cookie(sessionCookie)
	if err != nil || c.Value == "" {
		return nil, errNoSession
	}
	user, err := wb.acc.BookingSessionUser(r.Context(), c.Value)
	if err != nil {
		if service.ErrorCode(err) == service.CodeUnauthenticated {
			wb.clearSessionCookie(w, r)
			return nil, errNoSession
		}
		return nil, err
	}
	return &session{id: c.Value, user: user, csrf: wb.csrfToken(c.Value)}, nil
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

// secure reports whether the session cookie must be Secure: when Go
// terminates TLS, or when the pages' public URL is https (TLS terminated by a
// proxy in front).
func (wb *Pages) secure(r *http.Request) bool { return r.TLS != nil || wb.httpsOnly }

func (wb *Pages) setSessionCookie(w http.ResponseWriter, r *http.Request, sessionID string) {
	http.SetCookie(w, &http.Cookie{
		Name:     sessionCookie,
		Value:    sessionID,
		Path:     "/book",
		MaxAge:   int(accounts.BookingSessionMaxAge / time.Second),
		HttpOnly: true,
		Secure:   wb.secure(r),
		SameSite: http.SameSiteStrictMode,
	})
}

func (wb *Pages) clearSessionCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{
		Name:     sessionCookie,
		Path:     "/book",
		MaxAge:   -1,
		HttpOnly: true,
		Secure:   wb.secure(r),
		SameSite: http.SameSiteStrictMode,
	})
}
