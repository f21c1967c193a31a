package service

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Span attributes of the payment ports and the receipts (the engine's
// phases have theirs in package idem).
const (
	attrStripeOp   = attribute.Key("stripe.operation")
	attrStripeOut  = attribute.Key("stripe.outcome")
	attrStripeCode = attribute.Key("stripe.error.code")
	attrStripeHTTP = attribute.Key("stripe.http.status_code")
	// attrProcessor names the payment processor of a call: stripe, adyen.
	attrProcessor = attribute.Key("payment.processor")
)

// startPayment starts the span of one call to the payment processor.
func (mp meteredPayments) startPayment(ctx context.Context, op string) (context.Context, trace.Span) {
	return mp.tracer.Start(ctx, mp.processor+" "+op, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrStripeOp.String(op), attrProcessor.String(mp.processor)))
}

// endPayment records the call's outcome (ok, declined, invalid,
// configuration, unavailable) and the processor's answer. An unavailable
// processor or a refused configuration is an error of the span; a decline
// or an invalid request is the processor's definitive answer, recorded as
// such.
func endPayment(span trace.Span, err error) {
	span.SetAttributes(attrStripeOut.String(paymentOutcome(err)))
	var pe *PaymentError
	if errors.As(err, &pe) {
		if pe.Code != "" {
			span.SetAttributes(attrStripeCode.String(pe.Code))
		}
		if pe.HTTPStatus != 0 {
			span.SetAttributes(attrStripeHTTP.Int(pe.HTTPStatus))
		}
	}
	if err != nil {
		span.RecordError(err)
		switch {
		case PaymentClassOf(err) == PaymentClassConfiguration:
			span.SetStatus(codes.Error, "payment processor refused the configuration")
		case paymentKindOf(err) == PaymentUnavailable:
			span.SetStatus(codes.Error, "payment processor unavailable")
		}
	}
	span.End()
}

// paymentOutcomes are the outcome labels of processor calls.
var paymentOutcomes = []string{
	"ok", string(PaymentDeclined), string(PaymentInvalid), string(PaymentClassConfiguration), string(PaymentUnavailable),
}

// paymentOutcome is the outcome label of a processor call: ok, the kind of
// its failure (unavailable for a failure of unknown type), or configuration
// for a configuration-class failure, so that it is never counted as the
// processor being unavailable.
func paymentOutcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case PaymentClassOf(err) == PaymentClassConfiguration:
		return string(PaymentClassConfiguration)
	}
	return string(paymentKindOf(err))
}

func recordError(span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}
