package openapi

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"

	"github.com/danielgtaylor/huma/v2"

	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/accounts"
)

type userPutInput struct {
	Email string       `path:"email" minLength:"3" maxLength:"255" format:"email" pattern:"^[A-Za-z0-9!#$%&'*+/=?^_\\x60{|}~-]+(?:\\.[A-Za-z0-9!#$%&'*+/=?^_\\x60{|}~-]+)*@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$" patternDescription:"a plain ASCII email address like rider@example.com, its domain a host name" example:"rider@example.com" doc:"The rider's email address: ASCII only (receipts are sent without SMTPUTF8), no control or formatting characters; compared and stored lower-cased, so addresses that differ only in case are one rider."`
	Body  *userPutBody `required:"false"`
}

type userPutBody struct {
	// paymentSourceNull is whether the body gave payment_source as null,
	// which its schema does not allow (Huma's validation lets a null
	// through for an optional field, and decoding reads it as absent).
	paymentSourceNull bool
	PaymentSource     string `json:"payment_source,omitempty" maxLength:"255" pattern:"^[A-Za-z0-9_]+$" doc:"A payment processor token or source id. Required; only a development server (serve -dev) defaults it to the test card tok_visa (and, for an existing rider, keeps its source). Another source than the existing rider's replaces it." example:"tok_visa"`
}

// UnmarshalJSON decodes the body, noting a payment_source given as null.
func (b *userPutBody) UnmarshalJSON(data []byte) error {
	type plain userPutBody
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return err
	}
	if err := json.Unmarshal(data, (*plain)(b)); err != nil {
		return err
	}
	v, ok := fields["payment_source"]
	b.paymentSourceNull = ok && string(v) == "null"
	return nil
}

// Resolve refuses a payment_source given as null: 422 naming the field,
// as for any other value its schema does not allow. To keep a rider's
// source, leave the field out.
func (b *userPutBody) Resolve(_ huma.Context, prefix *huma.PathBuffer) []error {
	if !b.paymentSourceNull {
		return nil
	}
	return []error{&huma.ErrorDetail{Location: prefix.With("payment_source"), Message: "expected string, not null: leave the field out instead", Value: nil}}
}

// UserPutResponse is the body of PUT /users/{email}.
type UserPutResponse struct {
	User *service.User `json:"user"`
	// APIKey is only present when the user was created.
	APIKey string `json:"api_key,omitempty" doc:"The rider's API key, only when the user was created. Shown once; stored hashed."`
	// APIKeyID is the id of APIKey, only when the user was created.
	APIKeyID int64 `json:"api_key_id,omitempty" doc:"The id of api_key, by which it is listed and revoked; only when the user was created."`
}

type userPutOutput struct {
	Status int
	Body   UserPutResponse
}

// APIKeyResponse is the body of POST /users/{email}/api_keys.
type APIKeyResponse struct {
	User   *service.User `json:"user"`
	APIKey string        `json:"api_key" doc:"A new API key for the rider. Shown once; stored hashed."`
	// APIKeyID identifies the new key.
	APIKeyID int64 `json:"api_key_id" doc:"The id of api_key, by which it is listed and revoked."`
}

type apiKeyInput struct {
	Email string `path:"email" minLength:"3" maxLength:"255" format:"email" pattern:"^[A-Za-z0-9!#$%&'*+/=?^_\\x60{|}~-]+(?:\\.[A-Za-z0-9!#$%&'*+/=?^_\\x60{|}~-]+)*@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$" patternDescription:"a plain ASCII email address like rider@example.com, its domain a host name" example:"rider@example.com" doc:"The rider's email address, in any case."`
}

// APIKeyListResponse is the body of GET /users/{email}/api_keys.
type APIKeyListResponse struct {
	APIKeys []*accounts.APIKey `json:"api_keys" doc:"Every key of the rider, revoked ones included, oldest first. Never a secret."`
}

type apiKeyListOutput struct {
	Body APIKeyListResponse
}

type apiKeyRevokeInput struct {
	Email string `path:"email" minLength:"3" maxLength:"255" format:"email" pattern:"^[A-Za-z0-9!#$%&'*+/=?^_\\x60{|}~-]+(?:\\.[A-Za-z0-9!#$%&'*+/=?^_\\x60{|}~-]+)*@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$" patternDescription:"a plain ASCII email address like rider@example.com, its domain a host name" example:"rider@example.com" doc:"The rider's email address, in any case."`
	ID    int64  `path:"id" minimum:"1" example:"7431029865513702" doc:"The key's id (api_key_id): drawn at random when the key is minted, never given to another key."`
}

type apiKeyOutput struct {
	Body APIKeyResponse
}

func (h *handlers) registerUsers() {
	schema := h.api.OpenAPI().Components.Schemas.Schema(reflect.TypeOf(UserPutResponse{}), true, "UserPutResponse")
	op := huma.Operation{
		OperationID: "user-put",
		Method:      http.MethodPut,
		Path:        "/users/{email}",
		Summary:     "Create a rider, or replace an existing rider's payment source",
		Description: "One SERIALIZABLE transaction creates the user, an audit record, the first API key and the job that registers the payment source at every payment processor. " +
			"Idempotent by its URL and body, with no Idempotency-Key: a repeat with the same payment_source (a retry after a lost answer included) returns 200 with the user unchanged and no key, and registers nothing again. " +
			"An existing rider sent another payment_source has it replaced, in one transaction with an audit record (user.payment_source_replaced) and the job that registers the new source at every processor under its own entity-level key; " +
			"the answer is 200 with the new source, its registrations reset (none until a processor answers; a source the rider had before shows the answers it got then) and stripe_customer_id null until Stripe has the new source's customer. " +
			"A booking already in flight is charged with the source it was booked with; a new booking uses the new source. " +
			"If the answer of the 201 is lost, the key it carried is lost too: mint another with POST /users/{email}/api_keys.",
		Tags:          []string{"users"},
		DefaultStatus: http.StatusCreated,
		MaxBodyBytes:  maxBodyBytes,
		Security:      []map[string][]string{{schemeAdmin: {}}},
		Middlewares:   huma.Middlewares{h.requireAdmin},
		Responses: map[string]*huma.Response{
			"201": {Description: "Created, with the rider's first API key.", Content: map[string]*huma.MediaType{"application/json": {Schema: schema, Examples: map[string]*huma.Example{
				"created": example("Created; the key is shown this once", UserPutResponse{User: exampleUserNew(), APIKey: exampleAPIKey, APIKeyID: exampleKeyID}),
			}}}},
			"200": {Description: "The rider already existed (no API key): unchanged, or with the payment source replaced.", Content: map[string]*huma.MediaType{"application/json": {Schema: schema, Examples: map[string]*huma.Example{
				"existed":  example("The rider existed with this source: unchanged, no key", UserPutResponse{User: exampleUser()}),
				"replaced": example("The rider's source was replaced: its registrations start again", UserPutResponse{User: exampleUserReplaced()}),
			}}}},
		},
	}
	jsonRequestExamples(&op, map[string]*huma.Example{
		"visa":    example("Pay with a test Visa card", userPutBody{PaymentSource: "tok_visa"}),
		"decline": example("A card whose every charge is declined", userPutBody{PaymentSource: "tok_chargeCustomerFail"}),
		"replace": example("An existing rider registers another card (replaces a refused source)", userPutBody{PaymentSource: "tok_mastercard"}),
	})
	h.errorResponses(&op, 400, 401, 413, 415, 422, 429, 500, 503)
	withExamples(&op, "429", map[string]*huma.Example{"too-many-failures": authLimitedExample})
	withExamples(&op, "503", map[string]*huma.Example{"overloaded": overloadedExample})
	withExamples(&op, "400", map[string]*huma.Example{"malformed-json": problemExamples[http.StatusBadRequest]["malformed-json"]})
	withExamples(&op, "422", map[string]*huma.Example{"invalid-source": example("The payment source has characters outside [A-Za-z0-9_]",
		problem(422, "", "validation failed", &huma.ErrorDetail{Message: "expected string to match pattern ^[A-Za-z0-9_]+$", Location: "body.payment_source", Value: "tok visa"}))})
	withExamples(&op, "500", map[string]*huma.Example{"internal": example("Our failure: nothing was created; retry", problem(500, "", "internal error"))})
	huma.Register(h.api, op, h.userPut)

	op = huma.Operation{
		OperationID: "api-key-create",
		Method:      http.MethodPost,
		Path:        "/users/{email}/api_keys",
		Summary:     "Mint another API key for a rider",
		Description: "Creates a new API key for an existing rider; the rider's other keys stay valid. Not idempotent: " +
			"every request mints a key, so a retry after a lost answer mints another, and every minted key is valid. " +
			"It has no side effect beyond the key and its audit record, so a retry is harmless: keep the key you receive.",
		Tags:          []string{"users"},
		DefaultStatus: http.StatusCreated,
		Security:      []map[string][]string{{schemeAdmin: {}}},
		Middlewares:   huma.Middlewares{h.requireAdmin},
		Responses: map[string]*huma.Response{
			"201": {Description: "A new key; shown this once.", Content: map[string]*huma.MediaType{"application/json": {Examples: map[string]*huma.Example{
				"minted": example("A new key for the rider", APIKeyResponse{User: exampleUser(), APIKey: exampleAPIKey, APIKeyID: exampleKeyID}),
			}}}},
		},
	}
	h.errorResponses(&op, 401, 404, 422, 429, 500, 503)
	withExamples(&op, "429", map[string]*huma.Example{"too-many-failures": authLimitedExample})
	withExamples(&op, "503", map[string]*huma.Example{"overloaded": overloadedExample})
	withExamples(&op, "404", map[string]*huma.Example{"no-user": example("No rider with this email", problem(404, "", "no user with this email"))})
	withExamples(&op, "422", map[string]*huma.Example{"too-long": example("The email is longer than 255 characters",
		problem(422, "", "validation failed", &huma.ErrorDetail{Message: "expected length <= 255", Location: "path.email", Value: "a…@example.com"}))})
	withExamples(&op, "500", map[string]*huma.Example{"internal": example("Our failure: no key was minted; retry", problem(500, "", "internal error"))})
	huma.Register(h.api, op, h.apiKeyCreate)

	op = huma.Operation{
		OperationID: "user-get",
		Method:      http.MethodGet,
		Path:        "/users/{email}",
		Summary:     "Show a rider, with the registration of the rider's card at each payment processor",
		Description: "The rider and, for each payment processor that has answered, whether it stored the rider's card (registered) or refused the payment source (refused, with the processor's reason). " +
			"A refused source is the rider's to fix by registering another; bookings go to a processor where the card is registered, or answer 402 naming the refusal. A read: safe to retry.",
		Tags:        []string{"users"},
		Security:    []map[string][]string{{schemeAdmin: {}}},
		Middlewares: huma.Middlewares{h.requireAdmin},
	}
	op.Responses = map[string]*huma.Response{
		"200": {Description: "The rider, with the card's registration at each processor that answered.", Content: map[string]*huma.MediaType{"application/json": {Examples: map[string]*huma.Example{
			"registered": example("The card is registered at Stripe", exampleUser()),
			"refused":    example("Adyen refused the rider's payment source", exampleUserRefused()),
		}}}},
	}
	h.errorResponses(&op, 401, 404, 422, 500)
	withExamples(&op, "404", map[string]*huma.Example{"no-user": example("No rider with this email", problem(404, "", "no user with this email"))})
	huma.Register(h.api, op, h.userGet)

	op = huma.Operation{
		OperationID: "api-key-list",
		Method:      http.MethodGet,
		Path:        "/users/{email}/api_keys",
		Summary:     "List a rider's API keys (ids and times, never secrets)",
		Description: "Every key of the rider, revoked ones included, with when it was created, last used (to within a minute) and revoked. " +
			"A read: safe to retry any number of times.",
		Tags:        []string{"users"},
		Security:    []map[string][]string{{schemeAdmin: {}}},
		Middlewares: huma.Middlewares{h.requireAdmin},
	}
	op.Responses = map[string]*huma.Response{
		"200": {Description: "The rider's keys, oldest first.", Content: map[string]*huma.MediaType{"application/json": {Examples: map[string]*huma.Example{
			"keys": example("A live key and a revoked one", APIKeyListResponse{APIKeys: exampleAPIKeys()}),
		}}}},
	}
	h.errorResponses(&op, 401, 404, 422, 429, 500, 503)
	withExamples(&op, "429", map[string]*huma.Example{"too-many-failures": authLimitedExample})
	withExamples(&op, "503", map[string]*huma.Example{"overloaded": overloadedExample})
	withExamples(&op, "404", map[string]*huma.Example{"no-user": example("No rider with this email", problem(404, "", "no user with this email"))})
	huma.Register(h.api, op, h.apiKeyList)

	op = huma.Operation{
		OperationID:   "api-key-revoke",
		Method:        http.MethodDelete,
		Path:          "/users/{email}/api_keys/{id}",
		Summary:       "Revoke one of a rider's API keys",
		Description:   "The key is refused (401) by every instance within a second of the answer. Idempotent: revoking a revoked key answers 204 again, so a retry after a lost answer is safe. An unknown key, or another rider's, is 404.",
		Tags:          []string{"users"},
		DefaultStatus: http.StatusNoContent,
		Security:      []map[string][]string{{schemeAdmin: {}}},
		Middlewares:   huma.Middlewares{h.requireAdmin},
	}
	h.errorResponses(&op, 401, 404, 422, 429, 500, 503)
	withExamples(&op, "429", map[string]*huma.Example{"too-many-failures": authLimitedExample})
	withExamples(&op, "503", map[string]*huma.Example{"overloaded": overloadedExample})
	withExamples(&op, "404", map[string]*huma.Example{"no-key": example("No such key for this rider", problem(404, "", "no such API key for this user"))})
	huma.Register(h.api, op, h.apiKeyRevoke)
}

func (h *handlers) userPut(ctx context.Context, in *userPutInput) (*userPutOutput, error) {
	p := accounts.UserUpsertParams{Email: in.Email, IP: clientIP(ctx)}
	if in.Body != nil {
		p.PaymentSource = in.Body.PaymentSource
	}
	res, err := h.acc.UserUpsert(ctx, p)
	if err != nil {
		return nil, h.fail(ctx, "user put", err)
	}
	// 200 for an existing rider, whether its source was replaced or not:
	// the resource existed, and PUT answers its new state.
	out := &userPutOutput{Status: http.StatusOK, Body: UserPutResponse{User: res.User}}
	if res.Created {
		out.Status, out.Body.APIKey, out.Body.APIKeyID = http.StatusCreated, res.APIKey, res.APIKeyID
	}
	return out, nil
}

type userGetOutput struct {
	Body *service.User
}

func (h *handlers) userGet(ctx context.Context, in *apiKeyInput) (*userGetOutput, error) {
	user, err := h.acc.UserGet(ctx, in.Email)
	if err != nil {
		return nil, h.fail(ctx, "user get", err)
	}
	return &userGetOutput{Body: user}, nil
}

func (h *handlers) apiKeyCreate(ctx context.Context, in *apiKeyInput) (*apiKeyOutput, error) {
	user, key, err := h.acc.APIKeyMint(ctx, in.Email, clientIP(ctx))
	if err != nil {
		return nil, h.fail(ctx, "api key create", err)
	}
	return &apiKeyOutput{Body: APIKeyResponse{User: user, APIKey: key.Secret, APIKeyID: key.ID}}, nil
}

func (h *handlers) apiKeyList(ctx context.Context, in *apiKeyInput) (*apiKeyListOutput, error) {
	keys, err := h.acc.APIKeyList(ctx, in.Email)
	if err != nil {
		return nil, h.fail(ctx, "api key list", err)
	}
	return &apiKeyListOutput{Body: APIKeyListResponse{APIKeys: keys}}, nil
}

func (h *handlers) apiKeyRevoke(ctx context.Context, in *apiKeyRevokeInput) (*struct{}, error) {
	if err := h.acc.APIKeyRevoke(ctx, in.Email, in.ID, clientIP(ctx)); err != nil {
		return nil, h.fail(ctx, "api key revoke", err)
	}
	return nil, nil
}
