package service

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Span attributes of the engine, the Stripe port and the receipts.
const (
	attrFlow       = attribute.Key("atomicrides.flow")
	attrPhaseFrom  = attribute.Key("atomicrides.phase.from")
	attrPhaseTo    = attribute.Key("atomicrides.phase.to")
	attrPhaseClaim = attribute.Key("atomicrides.phase.claim")
	attrKeyID      = attribute.Key("atomicrides.key.id")
	attrStatus     = attribute.Key("atomicrides.response.status")
	attrReplayed   = attribute.Key("atomicrides.replayed")
	attrTxAttempts = attribute.Key("db.transaction.attempts")
	attrStripeOp   = attribute.Key("stripe.operation")
	attrStripeOut  = attribute.Key("stripe.outcome")
	attrStripeCode = attribute.Key("stripe.error.code")
	attrStripeHTTP = attribute.Key("stripe.http.status_code")
	// attrProcessor names the payment processor of a call: stripe, adyen.
	attrProcessor = attribute.Key("payment.processor")
)

// phaseClaim is the "from" of a claim transaction that runs no phase.
const phaseClaim RecoveryPoint = "claim"

// phaseSpanName names the span of an atomic phase: its flow and the
// recovery point it leaves ("claim" for a claim that runs no phase).
func phaseSpanName(flow string, from RecoveryPoint) string {
	return "phase " + flow + " " + string(from)
}

// startPhase starts the span of one atomic phase (one transaction, its
// retries included). claim marks the transaction that claims the key; its
// from is known only once the key is read, and set by endPhase.
func (s *Service) startPhase(ctx context.Context, flow string, from RecoveryPoint, claim bool) (context.Context, trace.Span) {
	return s.tracer.Start(ctx, phaseSpanName(flow, from), trace.WithAttributes(
		attrFlow.String(flow), attrPhaseFrom.String(string(from)), attrPhaseClaim.Bool(claim),
	))
}

// endPhase records what the phase did and ends its span: the recovery
// point it left, the one it reached (or the response it finished with),
// the key and the error that rolled it back.
func endPhase(span trace.Span, flow string, from RecoveryPoint, key *Key, o Outcome, resp *Response, err error) {
	span.SetName(phaseSpanName(flow, from))
	span.SetAttributes(attrPhaseFrom.String(string(from)))
	if key != nil {
		span.SetAttributes(attrKeyID.Int64(key.ID))
	}
	switch {
	case err != nil:
		recordError(span, err)
	case resp != nil && resp.Replayed:
		span.SetAttributes(attrReplayed.Bool(true), attrStatus.Int(resp.Status))
	case o.kind == outcomeMoveTo:
		span.SetAttributes(attrPhaseTo.String(string(o.point)))
	case o.kind == outcomeFinish:
		span.SetAttributes(attrPhaseTo.String(string(RecoveryPointFinished)), attrStatus.Int(o.status))
	}
	span.End()
}

// traceTxAttempt notes on the span of ctx that a transaction is run again
// after a serialization failure, a deadlock or a random id drawn twice.
func traceTxAttempt(ctx context.Context, attempt int, err error) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.AddEvent("transaction retried", trace.WithAttributes(
		attribute.Int("attempt", attempt), attribute.String("error", err.Error()),
	))
	span.SetAttributes(attrTxAttempts.Int(attempt + 1))
}

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
