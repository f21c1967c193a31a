package adyen

// The request and response bodies of the endpoints used, with the fields
// the service sends or reads.

// Amount is a value in minor units and an upper-case ISO 4217 currency.
type Amount struct {
	Currency string `json:"currency"`
	Value    int64  `json:"value"`
}

// paymentMethod is a card: a stored one (StoredPaymentMethodID) or, when a
// card is stored, its encrypted number.
type paymentMethod struct {
	Type                  string `json:"type"`
	StoredPaymentMethodID string `json:"storedPaymentMethodId,omitempty"`
	EncryptedCardNumber   string `json:"encryptedCardNumber,omitempty"`
}

// storeRequest is the body of POST /storedPaymentMethods.
type storeRequest struct {
	MerchantAccount          string        `json:"merchantAccount"`
	ShopperReference         string        `json:"shopperReference"`
	ShopperEmail             string        `json:"shopperEmail,omitempty"`
	RecurringProcessingModel string        `json:"recurringProcessingModel"`
	PaymentMethod            paymentMethod `json:"paymentMethod"`
}

// storedPaymentMethod is the answer of POST /storedPaymentMethods.
type storedPaymentMethod struct {
	ID               string `json:"id"`
	ShopperReference string `json:"shopperReference"`
	Type             string `json:"type"`
}

// paymentRequest is the body of POST /payments.
type paymentRequest struct {
	Amount                   Amount            `json:"amount"`
	MerchantAccount          string            `json:"merchantAccount"`
	Reference                string            `json:"reference"`
	PaymentMethod            paymentMethod     `json:"paymentMethod"`
	ShopperReference         string            `json:"shopperReference"`
	ShopperInteraction       string            `json:"shopperInteraction"`
	RecurringProcessingModel string            `json:"recurringProcessingModel"`
	Metadata                 map[string]string `json:"metadata,omitempty"`
	// Channel and ReturnURL: a payment with the shopper present, who may
	// be sent to authenticate and comes back to ReturnURL.
	Channel   string `json:"channel,omitempty"`
	ReturnURL string `json:"returnUrl,omitempty"`
	// AdditionalData carries manualCapture "true": a hold, captured later.
	AdditionalData map[string]string `json:"additionalData,omitempty"`
}

// Result codes of POST /payments that the service reads.
const (
	resultAuthorised = "Authorised"
	resultRefused    = "Refused"
	resultError      = "Error"
	resultCancelled  = "Cancelled"
	// The shopper must authenticate: the answer's action says where.
	resultRedirectShopper  = "RedirectShopper"
	resultChallengeShopper = "ChallengeShopper"
	resultIdentifyShopper  = "IdentifyShopper"
)

// action is what a shopper must do before Adyen decides a payment.
type action struct {
	Type   string `json:"type"`
	URL    string `json:"url,omitempty"`
	Method string `json:"method,omitempty"`
}

// detailsRequest is the body of POST /payments/details: what the shopper's
// return carried.
type detailsRequest struct {
	Details struct {
		RedirectResult string `json:"redirectResult"`
	} `json:"details"`
}

// cancelRequest is the body of POST /cancels: a payment cancelled by its
// merchant reference (Adyen may not have told its pspReference yet).
type cancelRequest struct {
	MerchantAccount  string `json:"merchantAccount"`
	PaymentReference string `json:"paymentReference"`
	Reference        string `json:"reference"`
}

// modificationRequest is the body of POST /payments/{pspReference}/cancels
// and /captures (Amount: a capture's).
type modificationRequest struct {
	MerchantAccount string  `json:"merchantAccount"`
	Reference       string  `json:"reference"`
	Amount          *Amount `json:"amount,omitempty"`
}

// cancelResponse is the answer of POST /cancels: taken on ("received"),
// its outcome told in a CANCELLATION notification.
type cancelResponse struct {
	PSPReference     string `json:"pspReference"`
	PaymentReference string `json:"paymentReference"`
	Status           string `json:"status"`
}

// paymentResponse is the answer of POST /payments.
type paymentResponse struct {
	PSPReference      string            `json:"pspReference"`
	ResultCode        string            `json:"resultCode"`
	RefusalReason     string            `json:"refusalReason,omitempty"`
	RefusalReasonCode string            `json:"refusalReasonCode,omitempty"`
	MerchantReference string            `json:"merchantReference,omitempty"`
	Amount            *Amount           `json:"amount,omitempty"`
	AdditionalData    map[string]string `json:"additionalData,omitempty"`
	Action            *action           `json:"action,omitempty"`
}

// refundRequest is the body of POST /payments/{pspReference}/refunds.
type refundRequest struct {
	MerchantAccount string `json:"merchantAccount"`
	Amount          Amount `json:"amount"`
	Reference       string `json:"reference"`
}

// refundResponse is the answer of POST /payments/{pspReference}/refunds:
// Adyen takes the refund on ("received") and settles it later.
type refundResponse struct {
	PSPReference        string `json:"pspReference"`
	PaymentPSPReference string `json:"paymentPspReference"`
	Status              string `json:"status"`
	Reference           string `json:"reference"`
	Amount              Amount `json:"amount"`
}

// serviceError is Adyen's error body.
type serviceError struct {
	Status       int    `json:"status"`
	ErrorCode    string `json:"errorCode"`
	Message      string `json:"message"`
	ErrorType    string `json:"errorType"`
	PSPReference string `json:"pspReference,omitempty"`
}
