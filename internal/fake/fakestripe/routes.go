package fakestripe

import (
	"net/http"
	"strings"
)

// Operation names, used by Request.Op and to target faults.
const (
	OpCustomerCreate   = "customer.create"
	OpCustomerRetrieve = "customer.retrieve"
	OpCustomerSearch   = "customer.search"
	OpChargeCreate     = "charge.create"
	OpChargeRetrieve   = "charge.retrieve"
	OpChargeSearch     = "charge.search"
	OpChargeList       = "charge.list"
	OpRefundCreate     = "refund.create"
	OpRefundRetrieve   = "refund.retrieve"
	OpRefundList       = "refund.list"
	OpEventList        = "event.list"

	OpPaymentIntentCreate   = "payment_intent.create"
	OpPaymentIntentRetrieve = "payment_intent.retrieve"
	OpPaymentIntentList     = "payment_intent.list"
	OpPaymentIntentConfirm  = "payment_intent.confirm"
	OpPaymentIntentCancel   = "payment_intent.cancel"
	OpPaymentIntentCapture  = "payment_intent.capture"

	// OpAny makes a fault target every operation.
	OpAny = "*"
)

// operation is one API endpoint: its name and its handler.
type operation struct {
	op     string
	handle func(c *call) response
}

// route maps a method and path to the operation serving it and, for
// retrievals and actions on an object, the object id in the path.
func route(method, path string) (operation, string, bool) {
	rest, ok := strings.CutPrefix(path, "/v1/")
	if !ok {
		return operation{}, "", false
	}
	if op, id, ok := paymentIntentAction(method, rest); ok {
		return op, id, true
	}
	resource, id, hasID := strings.Cut(rest, "/")
	if hasID && (id == "" || strings.Contains(id, "/")) {
		return operation{}, "", false
	}
	type key struct {
		method, resource string
		hasID, search    bool
	}
	k := key{method: method, resource: resource, hasID: hasID && id != "search", search: id == "search"}
	switch k {
	case key{http.MethodPost, "customers", false, false}:
		return operation{OpCustomerCreate, (*call).customerCreate}, "", true
	case key{http.MethodGet, "customers", true, false}:
		return operation{OpCustomerRetrieve, (*call).customerRetrieve}, id, true
	case key{http.MethodGet, "customers", false, true}:
		return operation{OpCustomerSearch, (*call).customerSearch}, "", true
	case key{http.MethodPost, "charges", false, false}:
		return operation{OpChargeCreate, (*call).chargeCreate}, "", true
	case key{http.MethodGet, "charges", false, false}:
		return operation{OpChargeList, (*call).chargeList}, "", true
	case key{http.MethodGet, "charges", true, false}:
		return operation{OpChargeRetrieve, (*call).chargeRetrieve}, id, true
	case key{http.MethodGet, "charges", false, true}:
		return operation{OpChargeSearch, (*call).chargeSearch}, "", true
	case key{http.MethodPost, "refunds", false, false}:
		return operation{OpRefundCreate, (*call).refundCreate}, "", true
	case key{http.MethodGet, "refunds", true, false}:
		return operation{OpRefundRetrieve, (*call).refundRetrieve}, id, true
	case key{http.MethodGet, "refunds", false, false}:
		return operation{OpRefundList, (*call).refundList}, "", true
	case key{http.MethodGet, "events", false, false}:
		return operation{OpEventList, (*call).eventList}, "", true
	case key{http.MethodPost, "payment_intents", false, false}:
		return operation{OpPaymentIntentCreate, (*call).paymentIntentCreate}, "", true
	case key{http.MethodGet, "payment_intents", false, false}:
		return operation{OpPaymentIntentList, (*call).paymentIntentList}, "", true
	case key{http.MethodGet, "payment_intents", true, false}:
		return operation{OpPaymentIntentRetrieve, (*call).paymentIntentRetrieve}, id, true
	}
	return operation{}, "", false
}

// paymentIntentAction routes POST payment_intents/{id}/{action}, the one
// resource with actions on its objects.
func paymentIntentAction(method, rest string) (operation, string, bool) {
	rest, ok := strings.CutPrefix(rest, "payment_intents/")
	if !ok || method != http.MethodPost {
		return operation{}, "", false
	}
	id, action, ok := strings.Cut(rest, "/")
	if !ok || id == "" || strings.Contains(action, "/") {
		return operation{}, "", false
	}
	switch action {
	case "confirm":
		return operation{OpPaymentIntentConfirm, (*call).paymentIntentConfirm}, id, true
	case "cancel":
		return operation{OpPaymentIntentCancel, (*call).paymentIntentCancel}, id, true
	case "capture":
		return operation{OpPaymentIntentCapture, (*call).paymentIntentCapture}, id, true
	}
	return operation{}, "", false
}

// knownOp reports whether op names an operation (or OpAny).
func knownOp(op string) bool {
	switch op {
	case OpCustomerCreate, OpCustomerRetrieve, OpCustomerSearch,
		OpChargeCreate, OpChargeRetrieve, OpChargeSearch, OpChargeList,
		OpRefundCreate, OpRefundRetrieve, OpRefundList, OpEventList,
		OpPaymentIntentCreate, OpPaymentIntentRetrieve, OpPaymentIntentList,
		OpPaymentIntentConfirm, OpPaymentIntentCancel, OpPaymentIntentCapture, OpAny:
		return true
	}
	return false
}
