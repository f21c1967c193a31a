package idem_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/atomicrides/atomicrides/service/idem"
)

// Example is a new idempotent operation with one foreign call: send a
// gift card. The call goes out only after a committed recovery point, with
// no transaction open, under a key derived from the client's; its answer
// is recorded, with the response, in one transaction. A retry under the
// same key, whenever it comes and whatever failed before, gets the same
// answer, and the card is issued once.
func Example() {
	ctx := context.Background()
	engine, err := idem.New(idem.Config{Pool: examplePool})
	if err != nil {
		panic(err)
	}
	cards := newIssuer() // the foreign service

	type params struct {
		Cents int64 `json:"cents"`
	}
	type state struct {
		params params
		card   string // the call's answer, for the phase to record
	}
	gift := &idem.Flow[state]{
		Name: "gift.send", Method: http.MethodPost, Path: "/gifts",
		Load: func(ctx context.Context, tx pgx.Tx, key *idem.Key) (*state, error) {
			st := &state{}
			return st, json.Unmarshal(key.Params, &st.params)
		},
		Steps: map[idem.RecoveryPoint]idem.Step[state]{
			idem.Started: {
				// No transaction is open: the foreign call, under a key that
				// is a function of the client's request only.
				Call: func(ctx context.Context, key *idem.Key, st *state) error {
					st.card = cards.Issue(fmt.Sprintf("gift-%d-%s", key.UserID, key.ClientKey), st.params.Cents)
					return nil
				},
				// One transaction: the domain's own writes (tx) and the
				// stored response commit together.
				Phase: func(ctx context.Context, tx pgx.Tx, key *idem.Key, st *state) (idem.Outcome, error) {
					return idem.Finish(http.StatusCreated, map[string]string{"card": st.card}), nil
				},
			},
		},
	}
	idem.Register(engine, gift) // the completer may finish it too

	owner, err := newOwner(ctx, examplePool, "gifter@example.com")
	if err != nil {
		panic(err)
	}
	req := idem.Request{UserID: owner, Key: "gift-0001", Method: http.MethodPost, Path: "/gifts", Params: params{Cents: 2500}}
	for range 3 {
		resp, err := idem.Run(ctx, engine, gift, req)
		if err != nil {
			panic(err)
		}
		fmt.Println(resp.Status, string(resp.Body), "replayed:", resp.Replayed)
	}
	req.Params = params{Cents: 9900}
	_, err = idem.Run(ctx, engine, gift, req)
	fmt.Println(err)
	fmt.Println("cards issued:", cards.Issued())
	// Output:
	// 201 {"card":"card_1_2500"} replayed: false
	// 201 {"card":"card_1_2500"} replayed: true
	// 201 {"card":"card_1_2500"} replayed: true
	// idem: this idempotency key was already used with a different request
	// cards issued: 1
}
