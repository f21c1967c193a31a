package service

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// meteredPayments counts, times and traces every call to the processor.
type meteredPayments struct {
	p      Payments
	m      *metrics
	tracer trace.Tracer
}

func (mp meteredPayments) CustomerCreate(ctx context.Context, params CustomerCreateParams) (c *Customer, err error) {
	ctx, span := mp.startPayment(ctx, "customer_create")
	defer mp.observe("customer_create", time.Now(), span, &err)
	return mp.p.CustomerCreate(ctx, params)
}

func (mp meteredPayments) CustomerFind(ctx context.Context, userID int64) (c *Customer, err error) {
	ctx, span := mp.startPayment(ctx, "customer_find")
	defer mp.observe("customer_find", time.Now(), span, &err)
	return mp.p.CustomerFind(ctx, userID)
}

func (mp meteredPayments) ChargeCreate(ctx context.Context, params ChargeCreateParams) (c *Charge, err error) {
	ctx, span := mp.startPayment(ctx, "charge_create")
	defer mp.observe("charge_create", time.Now(), span, &err)
	return mp.p.ChargeCreate(ctx, params)
}

func (mp meteredPayments) ChargeFind(ctx context.Context, rideID int64) (c *Charge, err error) {
	ctx, span := mp.startPayment(ctx, "charge_find")
	defer mp.observe("charge_find", time.Now(), span, &err)
	return mp.p.ChargeFind(ctx, rideID)
}

func (mp meteredPayments) RefundCreate(ctx context.Context, params RefundCreateParams) (r *Refund, err error) {
	ctx, span := mp.startPayment(ctx, "refund_create")
	defer mp.observe("refund_create", time.Now(), span, &err)
	return mp.p.RefundCreate(ctx, params)
}

func (mp meteredPayments) Budget() time.Duration { return mp.p.Budget() }

func (mp meteredPayments) observe(op string, start time.Time, span trace.Span, err *error) {
	mp.m.payment(op, time.Since(start), *err)
	endPayment(span, *err)
}

func (mp meteredPayments) RefundList(ctx context.Context, chargeID string) (r []*Refund, err error) {
	ctx, span := mp.startPayment(ctx, "refund_list")
	defer mp.observe("refund_list", time.Now(), span, &err)
	return mp.p.RefundList(ctx, chargeID)
}
