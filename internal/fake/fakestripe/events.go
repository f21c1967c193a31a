package fakestripe

import (
	"encoding/json"
	"sync"
	"time"
)

// apiVersion is the API version the server's events are rendered in:
// stripe-go v76's.
const apiVersion = "2023-10-16"

// Event is an event as the server records it: what happened to an object,
// with the object as it was then. Every event is listed by GET /v1/events
// and, while a webhook endpoint is set, delivered to it at least once.
type Event struct {
	ID      string    `json:"id"`
	Type    string    `json:"type"`
	Created time.Time `json:"created"`
	// Payload is the event's JSON as Stripe renders it (object "event").
	Payload json.RawMessage `json:"payload"`
}

// eventObject is the JSON shape of a Stripe event.
type eventObject struct {
	ID              string       `json:"id"`
	Object          string       `json:"object"`
	APIVersion      string       `json:"api_version"`
	Created         int64        `json:"created"`
	Data            eventData    `json:"data"`
	Livemode        bool         `json:"livemode"`
	PendingWebhooks int          `json:"pending_webhooks"`
	Request         eventRequest `json:"request"`
	Type            string       `json:"type"`
}

type eventData struct {
	Object any `json:"object"`
}

type eventRequest struct {
	ID             *string `json:"id"`
	IdempotencyKey *string `json:"idempotency_key"`
}

// eventLog holds the events in creation order.
type eventLog struct {
	mu   sync.Mutex
	list []*Event
}

func (l *eventLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.list = nil
}

// emit records an event of typ about obj (an API object's JSON shape) and
// hands it to the webhook sender.
func (s *Server) emit(typ string, obj any) {
	now := s.Now()
	ev := &Event{ID: newID("evt"), Type: typ, Created: now}
	ev.Payload = encode(eventObject{
		ID: ev.ID, Object: "event", APIVersion: apiVersion, Created: unix(now),
		Data: eventData{Object: obj}, PendingWebhooks: 1, Type: typ,
	})
	s.events.mu.Lock()
	s.events.list = append(s.events.list, ev)
	s.events.mu.Unlock()
	s.webhooks.send(ev)
}

// Events returns every event, in creation order.
func (s *Server) Events() []Event {
	s.events.mu.Lock()
	defer s.events.mu.Unlock()
	out := make([]Event, len(s.events.list))
	for i, e := range s.events.list {
		out[i] = *e
	}
	return out
}

// eventList is GET /v1/events: the events, newest first, within a created
// range and of one type when given, in pages as Stripe lists them. Stripe
// keeps 30 days of events; the fake keeps them all.
func (c *call) eventList() response {
	if bad, ok := rejectUnknown(c.params, "created", "type", "limit", "starting_after", "ending_before", "delivery_success"); ok {
		return bad
	}
	created, bad, ok := c.parseCreated()
	if !ok {
		return bad
	}
	typ := c.params.Get("type")
	c.s.events.mu.Lock()
	var found []*Event
	for _, e := range c.s.events.list {
		if (typ == "" || typ == e.Type) && created.match(e.Created) {
			found = append(found, e)
		}
	}
	c.s.events.mu.Unlock()
	return listPage(c, "/v1/events", "event", found,
		func(e *Event) string { return e.ID }, func(e *Event) any { return e.Payload })
}
