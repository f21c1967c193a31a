package openapi

import (
	"context"
	"net/http"
	"reflect"

	"github.com/danielgtaylor/huma/v2"

	"github.com/atomicrides/atomicrides/service"
)

type userPutInput struct {
	Email string       `path:"email" maxLength:"255" doc:"The rider's email address."`
	Body  *userPutBody `required:"false"`
}

type userPutBody struct {
	PaymentSource string `json:"payment_source,omitempty" maxLength:"255" pattern:"^[A-Za-z0-9_]+$" doc:"A payment processor token or source id. Default tok_visa." example:"tok_visa"`
}

// UserPutResponse is the body of PUT /users/{email}.
type UserPutResponse struct {
	User *service.User `json:"user"`
	// APIKey is only present when the user was created.
	APIKey string `json:"api_key,omitempty" doc:"The rider's API key, only when the user was created. Shown once; stored hashed."`
}

type userPutOutput struct {
	Status int
	Body   UserPutResponse
}

// APIKeyResponse is the body of POST /users/{email}/api_keys.
type APIKeyResponse struct {
	User   *service.User `json:"user"`
	APIKey string        `json:"api_key" doc:"A new API key for the rider. Shown once; stored hashed."`
}

type apiKeyInput struct {
	Email string `path:"email" maxLength:"255"`
}

type apiKeyOutput struct {
	Body APIKeyResponse
}

func (h *handlers) registerUsers() {
	schema := h.api.OpenAPI().Components.Schemas.Schema(reflect.TypeOf(UserPutResponse{}), true, "UserPutResponse")
	op := huma.Operation{
		OperationID:   "user-put",
		Method:        http.MethodPut,
		Path:          "/users/{email}",
		Summary:       "Create a rider unless one exists",
		Description:   "One SERIALIZABLE transaction creates the user, an audit record, the first API key and the job that creates the Stripe customer. Idempotent: a repeat returns 200 with the existing user and no key; an existing user is not changed.",
		Tags:          []string{"users"},
		DefaultStatus: http.StatusCreated,
		MaxBodyBytes:  maxBodyBytes,
		Security:      []map[string][]string{{schemeAdmin: {}}},
		Middlewares:   huma.Middlewares{h.requireAdmin},
		Responses: map[string]*huma.Response{
			"201": {Description: "Created, with the rider's first API key.", Content: map[string]*huma.MediaType{"application/json": {Schema: schema}}},
			"200": {Description: "The rider already existed (no API key).", Content: map[string]*huma.MediaType{"application/json": {Schema: schema}}},
		},
	}
	h.errorResponses(&op, 400, 401, 413, 422, 500)
	huma.Register(h.api, op, h.userPut)

	op = huma.Operation{
		OperationID:   "api-key-create",
		Method:        http.MethodPost,
		Path:          "/users/{email}/api_keys",
		Summary:       "Mint another API key for a rider",
		Tags:          []string{"users"},
		DefaultStatus: http.StatusCreated,
		Security:      []map[string][]string{{schemeAdmin: {}}},
		Middlewares:   huma.Middlewares{h.requireAdmin},
	}
	h.errorResponses(&op, 401, 404, 422, 500)
	huma.Register(h.api, op, h.apiKeyCreate)
}

func (h *handlers) userPut(ctx context.Context, in *userPutInput) (*userPutOutput, error) {
	p := service.UserUpsertParams{Email: in.Email, IP: clientIP(ctx)}
	if in.Body != nil {
		p.PaymentSource = in.Body.PaymentSource
	}
	res, err := h.svc.UserUpsert(ctx, p)
	if err != nil {
		return nil, h.fail(ctx, "user put", err)
	}
	out := &userPutOutput{Status: http.StatusOK, Body: UserPutResponse{User: res.User}}
	if res.Created {
		out.Status, out.Body.APIKey = http.StatusCreated, res.APIKey
	}
	return out, nil
}

func (h *handlers) apiKeyCreate(ctx context.Context, in *apiKeyInput) (*apiKeyOutput, error) {
	user, key, err := h.svc.APIKeyMint(ctx, in.Email, clientIP(ctx))
	if err != nil {
		return nil, h.fail(ctx, "api key create", err)
	}
	return &apiKeyOutput{Body: APIKeyResponse{User: user, APIKey: key}}, nil
}
