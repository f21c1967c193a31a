package service

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// meteredPayments counts, times and traces every call to the processor, and
// logs and counts every configuration-class failure, which operators alert
// on.
type meteredPayments struct {
	p         Payments
	processor string
	m         *metrics
	tracer    trace.Tracer
	logger    *slog.Logger
}

func (mp meteredPayments) CustomerCreate(ctx context.Context, params CustomerCreateParams) (c *Customer, err error) {
	ctx, span := mp.startPayment(ctx, "customer_create")
	defer mp.observe(ctx, "customer_create", time.Now(), span, &err)
	return mp.p.CustomerCreate(ctx, params)
}

func (mp meteredPayments) CustomerFind(ctx context.Context, key string) (c []*Customer, err error) {
	ctx, span := mp.startPayment(ctx, "customer_find")
	defer mp.observe(ctx, "customer_find", time.Now(), span, &err)
	return mp.p.CustomerFind(ctx, key)
}

func (mp meteredPayments) ChargeCreate(ctx context.Context, params ChargeCreateParams) (c *Charge, err error) {
	ctx, span := mp.startPayment(ctx, "charge_create")
	defer mp.observe(ctx, "charge_create", time.Now(), span, &err)
	return mp.p.ChargeCreate(ctx, params)
}

func (mp meteredPayments) ChargeFind(ctx context.Context, params ChargeFindParams) (c []*Charge, err error) {
	ctx, span := mp.startPayment(ctx, "charge_find")
	defer mp.observe(ctx, "charge_find", time.Now(), span, &err)
	return mp.p.ChargeFind(ctx, params)
}

func (mp meteredPayments) PaymentGet(ctx context.Context, id string) (c *Charge, err error) {
	ctx, span := mp.startPayment(ctx, "payment_get")
	defer mp.observe(ctx, "payment_get", time.Now(), span, &err)
	return mp.p.PaymentGet(ctx, id)
}

func (mp meteredPayments) PaymentCancel(ctx context.Context, params PaymentCancelParams) (c *Charge, err error) {
	ctx, span := mp.startPayment(ctx, "payment_cancel")
	defer mp.observe(ctx, "payment_cancel", time.Now(), span, &err)
	return mp.p.PaymentCancel(ctx, params)
}

func (mp meteredPayments) PaymentDetails(ctx context.Context, params PaymentDetailsParams) (c *Charge, err error) {
	ctx, span := mp.startPayment(ctx, "payment_details")
	defer mp.observe(ctx, "payment_details", time.Now(), span, &err)
	return mp.p.PaymentDetails(ctx, params)
}

func (mp meteredPayments) PaymentCapture(ctx context.Context, params PaymentCaptureParams) (c *Charge, err error) {
	ctx, span := mp.startPayment(ctx, "payment_capture")
	defer mp.observe(ctx, "payment_capture", time.Now(), span, &err)
	return mp.p.PaymentCapture(ctx, params)
}

func (mp meteredPayments) ChargeGet(ctx context.Context, id string) (c *Charge, err error) {
	ctx, span := mp.startPayment(ctx, "charge_get")
	defer mp.observe(ctx, "charge_get", time.Now(), span, &err)
	return mp.p.ChargeGet(ctx, id)
}

func (mp meteredPayments) ChargeListSince(ctx context.Context, since time.Time) (c []*Charge, err error) {
	ctx, span := mp.startPayment(ctx, "charge_list_since")
	defer mp.observe(ctx, "charge_list_since", time.Now(), span, &err)
	return mp.p.ChargeListSince(ctx, since)
}

func (mp meteredPayments) RefundCreate(ctx context.Context, params RefundCreateParams) (r *Refund, err error) {
	ctx, span := mp.startPayment(ctx, "refund_create")
	defer mp.observe(ctx, "refund_create", time.Now(), span, &err)
	return mp.p.RefundCreate(ctx, params)
}

func (mp meteredPayments) RefundList(ctx context.Context, chargeID string) (r []*Refund, err error) {
	ctx, span := mp.startPayment(ctx, "refund_list")
	defer mp.observe(ctx, "refund_list", time.Now(), span, &err)
	return mp.p.RefundList(ctx, chargeID)
}

func (mp meteredPayments) RefundListSince(ctx context.Context, since time.Time) (r []*Refund, err error) {
	ctx, span := mp.startPayment(ctx, "refund_list_since")
	defer mp.observe(ctx, "refund_list_since", time.Now(), span, &err)
	return mp.p.RefundListSince(ctx, since)
}

func (mp meteredPayments) Budget() time.Duration { return mp.p.Budget() }

func (mp meteredPayments) observe(ctx context.Context, op string, start time.Time, span trace.Span, err *error) {
	mp.m.payment(mp.processor, op, time.Since(start), *err)
	endPayment(span, *err)
	if *err != nil && PaymentClassOf(*err) == PaymentClassConfiguration {
		mp.m.stripeConfigError(mp.processor, op)
		mp.logger.ErrorContext(ctx, "payment processor refused our configuration: the request stays unfinished until an operator fixes it",
			"processor", mp.processor, "operation", op, "err", *err)
	}
}
