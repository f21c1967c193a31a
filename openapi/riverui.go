package openapi

import (
	"mime"
	"net/http"
	"strings"
)

// riverUIPrefix is where River UI is mounted; its JSON API is under
// riverUIPrefix + "api/".
const riverUIPrefix = "/riverui/"

// guardRiverUI keeps River UI from being driven by another site through an
// operator's browser, which holds the Basic credentials and sends them
// along with any request.
//
//   - Every state-changing request must be same-origin, as
//     http.CrossOriginProtection judges it (Sec-Fetch-Site, else Origin
//     against Host); requests without either header (curl, scripts) are
//     not a browser's and pass.
//   - A state-changing request of its API must be JSON: Content-Type
//     application/json. River UI's own page posts its JSON bodies without a
//     Content-Type, which fetch sends as text/plain; such a request is
//     accepted only when the browser itself vouches that it comes from this
//     origin (Sec-Fetch-Site: same-origin), which no other site can make a
//     browser say. Anything else is 415.
func guardRiverUI(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, http.StatusForbidden, "cross-origin request to River UI refused")
	}))
	return cop.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !safeMethod(r.Method) && strings.HasPrefix(r.URL.Path, riverUIPrefix+"api/") && !jsonRequest(r) {
			writeProblem(w, http.StatusUnsupportedMediaType, "River UI's API takes JSON only (Content-Type: application/json)")
			return
		}
		next.ServeHTTP(w, r)
	}))
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// jsonRequest reports whether r declares a JSON body, or is a request of
// River UI's own page as a same-origin browser request.
func jsonRequest(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err == nil && mt == "application/json" {
		return true
	}
	if r.Header.Get("Sec-Fetch-Site") != "same-origin" {
		return false
	}
	if ct == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "text/plain"
}
