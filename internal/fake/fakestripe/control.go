package fakestripe

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"
)

// controlPrefix is where the server's own endpoints live, outside the
// Stripe API; see the package documentation.
const controlPrefix = "/_fake/"

func (s *Server) serveControl(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, controlPrefix)
	if id, ok := strings.CutPrefix(path, "challenge/"); ok {
		s.serveChallenge(w, r, id)
		return
	}
	if rest, ok := strings.CutPrefix(path, "payment_intents/"); ok && r.Method == http.MethodPost {
		if id, ok := strings.CutSuffix(rest, "/authenticate"); ok && id != "" && !strings.Contains(id, "/") {
			s.serveAuthenticate(w, r, id)
			return
		}
		if id, ok := strings.CutSuffix(rest, "/expire"); ok && id != "" && !strings.Contains(id, "/") {
			s.serveExpire(w, id)
			return
		}
	}
	switch r.Method + " " + path {
	case "GET ledger":
		writeJSON(w, http.StatusOK, s.Snapshot())
	case "GET faults":
		writeJSON(w, http.StatusOK, map[string][]Fault{"faults": s.Faults()})
	case "POST faults":
		faults, err := decodeFaults(r.Body)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		for _, f := range faults {
			s.faults.inject(f)
		}
		writeJSON(w, http.StatusOK, map[string][]Fault{"faults": s.Faults()})
	case "DELETE faults":
		s.ClearFaults()
		writeJSON(w, http.StatusOK, map[string][]Fault{"faults": {}})
	case "POST clock":
		var body struct {
			Advance string `json:"advance"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		d, err := time.ParseDuration(body.Advance)
		if err != nil || d < 0 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "advance must be a non-negative duration such as \"25h\""})
			return
		}
		s.Advance(d)
		writeJSON(w, http.StatusOK, map[string]time.Time{"now": s.Now()})
	case "POST webhooks":
		// The endpoint events are delivered to, with its fault switches;
		// an empty url stops deliveries.
		var ep WebhookEndpoint
		if err := json.NewDecoder(r.Body).Decode(&ep); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		if ep.URL == "" {
			s.SetWebhookEndpoint(nil)
		} else {
			s.SetWebhookEndpoint(&ep)
		}
		writeJSON(w, http.StatusOK, map[string]bool{"set": ep.URL != ""})
	case "GET events":
		// pending: deliveries not yet answered 2xx nor given up.
		writeJSON(w, http.StatusOK, map[string]any{"events": s.Events(), "deliveries": s.WebhookDeliveries(),
			"pending": s.webhooks.pending.Load()})
	case "POST dashboard/refunds", "POST disputes", "POST disputes/close":
		var body struct {
			Charge  string `json:"charge"`
			Dispute string `json:"dispute"`
			Status  string `json:"status"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		var (
			out any
			err error
		)
		switch strings.TrimPrefix(r.URL.Path, controlPrefix) {
		case "dashboard/refunds":
			out, err = s.DashboardRefund(body.Charge)
		case "disputes":
			out, err = s.DisputeOpen(body.Charge)
		default:
			out, err = s.DisputeClose(body.Dispute, body.Status)
		}
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, out)
	case "POST outage":
		// {"on": true} answers every API request 503 until {"on": false}.
		var body struct {
			On *bool `json:"on"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.On == nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": `want {"on": true} or {"on": false}`})
			return
		}
		s.SetOutage(*body.On)
		writeJSON(w, http.StatusOK, map[string]bool{"outage": *body.On})
	case "POST reset":
		s.Reset()
		writeJSON(w, http.StatusOK, map[string]bool{"reset": true})
	default:
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "unknown control endpoint " + r.Method + " " + r.URL.Path})
	}
}

// serveExpire is POST /_fake/payment_intents/{id}/expire: ExpireHold over
// HTTP. It answers the PaymentIntent as the ledger records it; 404 for an
// unknown PaymentIntent, 409 for one that holds nothing.
func (s *Server) serveExpire(w http.ResponseWriter, id string) {
	err := s.ExpireHold(id)
	switch {
	case errors.Is(err, errNoSuchPaymentIntent):
		writeJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
		return
	case err != nil:
		writeJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
		return
	}
	pi, _ := s.PaymentIntent(id)
	writeJSON(w, http.StatusOK, pi)
}

// decodeFaults reads one fault or an array of faults and validates them all
// before any is injected.
func decodeFaults(body io.Reader) ([]Fault, error) {
	raw, err := io.ReadAll(io.LimitReader(body, 1<<20))
	if err != nil {
		return nil, err
	}
	var faults []Fault
	if trimmed := strings.TrimSpace(string(raw)); strings.HasPrefix(trimmed, "[") {
		err = json.Unmarshal(raw, &faults)
	} else {
		var f Fault
		err = json.Unmarshal(raw, &f)
		faults = []Fault{f}
	}
	if err != nil {
		return nil, err
	}
	if len(faults) == 0 {
		return nil, errors.New("no fault given")
	}
	for _, f := range faults {
		if err := f.Validate(); err != nil {
			return nil, err
		}
	}
	return faults, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(encode(v))
}
