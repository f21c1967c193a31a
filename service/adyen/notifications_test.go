package adyen_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakeadyen"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/adyen"
)

// Adyen's published example of a signed notification item.
const (
	docKey       = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"
	docSignature = "coqCmt/IZ4E3CzPvMY8zTjQVL5hYJUiBRg8UU+iCWo0="
)

var docItem = adyen.NotificationRequestItem{
	Amount:    adyen.Amount{Currency: "EUR", Value: 1130},
	EventCode: "AUTHORISATION", MerchantAccountCode: "TestMerchant",
	MerchantReference: "TestPayment-1407325143704", PSPReference: "7914073381342284", Success: "true",
}

func TestNotificationSignatureIsAdyens(t *testing.T) {
	key, err := adyen.ParseHMACKey(docKey)
	require.NoError(t, err)
	require.Equal(t, "7914073381342284::TestMerchant:TestPayment-1407325143704:1130:EUR:AUTHORISATION:true", docItem.SignedString())
	require.Equal(t, docSignature, docItem.Sign(key))
	// The fake signs the same way.
	sig, err := fakeadyen.SignItem(fakeadyen.NotificationItem{
		Amount: fakeadyen.NotifiedAmount{Currency: "EUR", Value: 1130}, EventCode: "AUTHORISATION",
		MerchantAccountCode: "TestMerchant", MerchantReference: "TestPayment-1407325143704",
		PSPReference: "7914073381342284", Success: "true",
	}, docKey)
	require.NoError(t, err)
	require.Equal(t, docSignature, sig)
}

func TestNotificationsParse(t *testing.T) {
	n, err := adyen.NewNotifications([]string{docKey}, "TestMerchant")
	require.NoError(t, err)
	item := fakeadyen.NotificationItem{
		AdditionalData: map[string]string{"metadata.ar_ns": "ns1", "metadata.ar_rider": "r1"},
		Amount:         fakeadyen.NotifiedAmount{Currency: "USD", Value: 2000}, EventCode: "AUTHORISATION",
		EventDate: "2026-11-25T12:00:00Z", MerchantAccountCode: "TestMerchant", MerchantReference: "ar-ch-1",
		PSPReference: "P1", Success: "true",
	}
	body, err := fakeadyen.NotificationBody(docKey, item)
	require.NoError(t, err)
	msgs, err := n.VerifyBatch(body, "")
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	ev := msgs[0].Event
	require.Equal(t, "P1:AUTHORISATION:true", ev.ID)
	require.Equal(t, service.InboundChargeOutcome, ev.Kind)
	require.Equal(t, service.Tag{Namespace: "ns1", Rider: "r1", Key: "ar-ch-1"}, ev.Charge.Tag)
	require.Equal(t, "usd", ev.Charge.Currency)
	again, err := n.Parse(msgs[0].Payload)
	require.NoError(t, err)
	require.Equal(t, ev, again, "the recorded item parses as verified")

	item.MerchantAccountCode = "OtherMerchant"
	body, err = fakeadyen.NotificationBody(docKey, item)
	require.NoError(t, err)
	msgs, err = n.VerifyBatch(body, "")
	require.NoError(t, err)
	require.True(t, msgs[0].Event.ForeignAccount)

	_, err = n.VerifyBatch([]byte(`{"notificationItems":[{"NotificationRequestItem":{"pspReference":"P","eventCode":"X","success":"true"}}]}`), "")
	require.True(t, errors.Is(err, service.RejectMissingSignature), "%v", err)

	for _, bad := range []string{"", "abc", "zz" + docKey[2:], docKey[:31]} {
		_, err := adyen.NewNotifications([]string{bad}, "TestMerchant")
		require.Error(t, err, bad)
	}
}
