package adyen

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"time"

	"github.com/atomicrides/atomicrides/service"
)

// Operation names, for errors and classification.
const (
	opStore   = "store"
	opPayment = "payment"
	opRefund  = "refund"
	opDetails = "details"
	opCancel  = "cancel"
	opCapture = "capture"
)

// Request constants of a ride's payment: a card stored by the service and
// charged by it without the rider present.
const (
	methodScheme             = "scheme"
	interactionContAuth      = "ContAuth"
	interactionEcommerce     = "Ecommerce"
	channelWeb               = "Web"
	modelUnscheduledCardFile = "UnscheduledCardOnFile"
)

// Metadata keys of the service's tag on a payment (at most 20 keys of 20
// characters, values of 80).
const (
	metaNamespace = "ar_ns"
	metaRider     = "ar_rider"
	metaKey       = "ar_key"
	// metaCapture is "manual" on a hold: its AUTHORISATION notification
	// says so, so that a hold whose booking was lost is released, not
	// refunded.
	metaCapture = "ar_capture"
)

// errNotAuthorised underlies the error of a payment answered without being
// authorised.
var errNotAuthorised = errors.New("adyen: payment not authorised")

// CustomerCreate stores the rider's card at Adyen for the shopper
// params.Tag.Rider (a pure function of the namespace and the rider's
// email), under params.IdempotencyKey, and returns its
// storedPaymentMethodId as the customer's id. params.Source is sent as the
// card's encrypted number: in production the booking page collects it with
// Adyen's card fields; the fake Adyen accepts the test tokens of the fake
// Stripe. A card Adyen refuses is a PaymentClassRefusal with Code
// service.PaymentCodeSourceRefused: the rider's registration state.
func (c *Client) CustomerCreate(ctx context.Context, params service.CustomerCreateParams) (*service.Customer, error) {
	var out storedPaymentMethod
	err := c.post(ctx, opStore, "/storedPaymentMethods", params.IdempotencyKey, storeRequest{
		MerchantAccount:          c.merchant,
		ShopperReference:         params.Tag.Rider,
		ShopperEmail:             params.Email,
		RecurringProcessingModel: modelUnscheduledCardFile,
		PaymentMethod:            paymentMethod{Type: methodScheme, EncryptedCardNumber: params.Source},
	}, &out)
	if err != nil {
		return nil, err
	}
	if out.ID == "" {
		return nil, unavailable("adyen store: answer without an id", 0, errNotAuthorised)
	}
	return &service.Customer{ID: out.ID, Tag: params.Tag}, nil
}

// ChargeCreate charges the stored card params.CustomerID of the shopper
// params.Tag.Rider, with the tag as metadata and its key as the merchant
// reference. On service.PaymentAPIIntents the shopper is present
// (Ecommerce, with params.ReturnURL): the card's bank may ask the shopper to
// authenticate, answered as service.ChargeRequiresAction with the action's
// URL. On service.PaymentAPICharges it is a merchant-initiated payment
// (ContAuth), as rides booked before were charged. resultCode Authorised is
// the charge (its pspReference is the charge's id); Refused is a
// PaymentClassDecline carrying refusalReason; Error and Cancelled are
// refusals (definitive: not charged); any other result (Pending,
// Received) is indeterminate.
func (c *Client) ChargeCreate(ctx context.Context, params service.ChargeCreateParams) (*service.Charge, error) {
	req := paymentRequest{
		Amount:                   Amount{Currency: strings.ToUpper(params.Currency), Value: params.AmountCents},
		MerchantAccount:          c.merchant,
		Reference:                params.Tag.Key,
		PaymentMethod:            paymentMethod{Type: methodScheme, StoredPaymentMethodID: params.CustomerID},
		ShopperReference:         params.Tag.Rider,
		ShopperInteraction:       interactionContAuth,
		RecurringProcessingModel: modelUnscheduledCardFile,
		Metadata: map[string]string{
			metaNamespace: params.Tag.Namespace, metaRider: params.Tag.Rider, metaKey: params.Tag.Key,
		},
	}
	if params.API == service.PaymentAPIIntents && !params.OffSession {
		req.ShopperInteraction, req.Channel, req.ReturnURL = interactionEcommerce, channelWeb, params.ReturnURL
	}
	if params.ManualCapture {
		req.AdditionalData = map[string]string{"manualCapture": "true"}
		req.Metadata[metaCapture] = captureManual
	}
	var out paymentResponse
	if err := c.post(ctx, opPayment, "/payments", params.IdempotencyKey, req, &out); err != nil {
		return nil, err
	}
	switch out.ResultCode {
	case resultRedirectShopper, resultChallengeShopper, resultIdentifyShopper:
		ch := &service.Charge{
			PaymentID: out.PSPReference, AmountCents: params.AmountCents, Currency: params.Currency,
			Status: service.ChargeRequiresAction, Created: time.Now().UTC(), Tag: params.Tag,
			Action: &service.PaymentAction{Type: "redirect_to_url"},
		}
		if out.Action != nil {
			ch.Action.URL = out.Action.URL
		}
		if ch.Action.URL == "" {
			return nil, unavailable("adyen payment "+params.Tag.Key+": "+out.ResultCode+" without a redirect", 200, errNotAuthorised)
		}
		return ch, nil
	}
	ch, err := paymentOutcome(out, params.Tag, params.AmountCents, params.Currency)
	if err == nil && params.ManualCapture {
		ch.Status, ch.CapturedCents = service.ChargeAuthorized, 0
	}
	return ch, err
}

// paymentOutcome is a decided payment as the service sees it: Authorised
// is the charge, Refused a decline, Error and Cancelled refusals, anything
// else indeterminate.
func paymentOutcome(out paymentResponse, tag service.Tag, amount int64, currency string) (*service.Charge, error) {
	switch out.ResultCode {
	case resultAuthorised:
		return &service.Charge{
			ID: out.PSPReference, PaymentID: out.PSPReference, AmountCents: amount, Currency: currency,
			Status: service.ChargeSucceeded, Created: time.Now().UTC(),
			Tag: tag, CapturedCents: amount,
		}, nil
	case resultRefused:
		return nil, &service.PaymentError{
			Class: service.PaymentClassDecline, Kind: service.PaymentDeclined,
			Code: out.RefusalReasonCode, Message: out.RefusalReason, HTTPStatus: 200, Err: errNotAuthorised,
		}
	case resultError, resultCancelled:
		return nil, &service.PaymentError{
			Class: service.PaymentClassRefusal, Kind: service.PaymentInvalid,
			Code: out.ResultCode, Message: out.RefusalReason, HTTPStatus: 200, Err: errNotAuthorised,
		}
	default:
		return nil, unavailable("adyen payment "+out.PSPReference+" is "+out.ResultCode, 200, errNotAuthorised)
	}
}

// PaymentDetails submits the redirectResult the shopper came back with and
// returns the payment's outcome: the charge when Authorised (its Tag.Key
// is the payment's merchant reference), the payment failed
// (service.ChargeFailed, with the refusal) when Refused. An unknown or
// forged redirectResult is Adyen's 422, a PaymentClassRefusal.
func (c *Client) PaymentDetails(ctx context.Context, params service.PaymentDetailsParams) (*service.Charge, error) {
	var req detailsRequest
	req.Details.RedirectResult = params.RedirectResult
	var out paymentResponse
	if err := c.post(ctx, opDetails, "/payments/details", params.IdempotencyKey, req, &out); err != nil {
		return nil, err
	}
	tag := service.Tag{Key: out.MerchantReference}
	var amount int64
	var currency string
	if out.Amount != nil {
		amount, currency = out.Amount.Value, strings.ToLower(out.Amount.Currency)
	}
	ch, err := paymentOutcome(out, tag, amount, currency)
	if pe := service.PaymentFinal(err); pe != nil {
		return &service.Charge{
			PaymentID: out.PSPReference, AmountCents: amount, Currency: currency, Status: service.ChargeFailed,
			FailureCode: pe.Code, FailureMessage: pe.Message, Created: time.Now().UTC(), Tag: tag,
		}, nil
	}
	return ch, err
}

// PaymentCancel cancels the payment made under the merchant reference
// params.Reference (POST /cancels: a payment waiting for its shopper has no
// pspReference yet). Adyen takes it on; its outcome comes in a
// CANCELLATION notification.
func (c *Client) PaymentCancel(ctx context.Context, params service.PaymentCancelParams) (*service.Charge, error) {
	if params.Hold && params.PaymentID != "" {
		return c.holdCancel(ctx, params)
	}
	var out cancelResponse
	err := c.post(ctx, opCancel, "/cancels", params.IdempotencyKey, cancelRequest{
		MerchantAccount: c.merchant, PaymentReference: params.Reference, Reference: params.Reference,
	}, &out)
	if err != nil {
		return nil, err
	}
	return &service.Charge{PaymentID: params.PaymentID, Status: service.ChargeCancelRequested, Tag: service.Tag{Key: params.Reference}}, nil
}

// holdCancel releases the authorized hold params.PaymentID (POST
// /payments/{pspReference}/cancels). Adyen takes it on; its outcome comes
// in a CANCELLATION notification.
func (c *Client) holdCancel(ctx context.Context, params service.PaymentCancelParams) (*service.Charge, error) {
	var out cancelResponse
	path := "/payments/" + url.PathEscape(params.PaymentID) + "/cancels"
	if err := c.post(ctx, opCancel, path, params.IdempotencyKey, modificationRequest{
		MerchantAccount: c.merchant, Reference: params.Reference,
	}, &out); err != nil {
		return nil, err
	}
	return &service.Charge{PaymentID: params.PaymentID, Status: service.ChargeCancelRequested, Tag: service.Tag{Key: params.Reference}}, nil
}

// PaymentCapture asks Adyen to capture params.AmountCents of the
// authorized hold params.PaymentID (POST /payments/{pspReference}/captures;
// the rest of the hold is released). Adyen takes it on
// (service.ChargeCaptureRequested, with the capture's pspReference as ID);
// its outcome comes in a CAPTURE notification.
func (c *Client) PaymentCapture(ctx context.Context, params service.PaymentCaptureParams) (*service.Charge, error) {
	var out refundResponse
	path := "/payments/" + url.PathEscape(params.PaymentID) + "/captures"
	if err := c.post(ctx, opCapture, path, params.IdempotencyKey, modificationRequest{
		MerchantAccount: c.merchant, Reference: params.Reference,
		Amount: &Amount{Currency: strings.ToUpper(params.Currency), Value: params.AmountCents},
	}, &out); err != nil {
		return nil, err
	}
	if out.PSPReference == "" {
		return nil, unavailable("adyen capture of "+params.PaymentID+": answer without a pspReference", 201, errNotAuthorised)
	}
	return &service.Charge{
		ID: out.PSPReference, PaymentID: params.PaymentID, AmountCents: params.AmountCents, Currency: params.Currency,
		Status: service.ChargeCaptureRequested, Created: time.Now().UTC(), Tag: service.Tag{Key: params.Reference},
	}, nil
}

// RefundCreate asks Adyen to refund the payment params.ChargeID in full.
// Adyen takes a refund on asynchronously ("received"): the refund is
// returned as service.RefundPending, with its pspReference as id.
func (c *Client) RefundCreate(ctx context.Context, params service.RefundCreateParams) (*service.Refund, error) {
	if params.AmountCents <= 0 || params.Currency == "" {
		return nil, &service.PaymentError{
			Class: service.PaymentClassConfiguration, Kind: service.PaymentUnavailable,
			Message: "adyen refund: the amount and currency are required", Err: errNotAuthorised,
		}
	}
	var out refundResponse
	err := c.post(ctx, opRefund, "/payments/"+url.PathEscape(params.ChargeID)+"/refunds", params.IdempotencyKey, refundRequest{
		MerchantAccount: c.merchant,
		Amount:          Amount{Currency: strings.ToUpper(params.Currency), Value: params.AmountCents},
		Reference:       params.Tag.Key,
	}, &out)
	if err != nil {
		return nil, err
	}
	return &service.Refund{
		ID: out.PSPReference, ChargeID: params.ChargeID, AmountCents: out.Amount.Value,
		Status: service.RefundPending, Created: time.Now().UTC(), Tag: params.Tag,
	}, nil
}
