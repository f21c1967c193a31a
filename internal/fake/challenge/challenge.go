// Package challenge is the bank's authentication page of the fake
// processors (3-D Secure): a page that shows the payment and two forms,
// Complete and Fail, each posting action=complete or action=fail back to
// the page, and the short pages that answer anything else. Each fake
// decides what an answer does to its payment; this package only draws.
package challenge

import (
	"html/template"
	"io"
	"net/http"
	"strings"
)

// Page is what the challenge page shows.
type Page struct {
	// Processor names the fake in the page's title, e.g. "Stripe".
	Processor string
	// Amount is the payment's amount as people read it, e.g. "12.50 EUR".
	Amount string
	// Label and ID name the payment, e.g. "PaymentIntent" and its id; ID
	// is shown in an element of id IDElement.
	Label, ID, IDElement string
	// Action is the path the forms post to.
	Action string
}

var page = template.Must(template.New("challenge").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Processor}} 3-D Secure test page</title>
<style>
body { font-family: system-ui, sans-serif; max-width: 32rem; margin: 3rem auto; padding: 0 1rem; }
form { display: inline-block; margin-right: 1rem; }
button { font-size: 1rem; padding: 0.5rem 1rem; }
</style>
</head>
<body>
<main>
<h1>3-D Secure test page</h1>
<p>The bank asks you to authenticate a payment of <strong id="amount">{{.Amount}}</strong>.</p>
<p>{{.Label}} <code id="{{.IDElement}}">{{.ID}}</code></p>
<form method="post" action="{{.Action}}">
<input type="hidden" name="action" value="complete">
<button type="submit" id="complete">Complete authentication</button>
</form>
<form method="post" action="{{.Action}}">
<input type="hidden" name="action" value="fail">
<button type="submit" id="fail">Fail authentication</button>
</form>
</main>
</body>
</html>
`))

type message struct{ Processor, Title, Message string }

var messagePage = template.Must(template.New("message").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{.Processor}} 3-D Secure test page: {{.Title}}</title>
</head>
<body>
<main>
<h1>{{.Title}}</h1>
<p id="message">{{.Message}}</p>
</main>
</body>
</html>
`))

// Write answers with the challenge page p.
func Write(w http.ResponseWriter, p Page) { write(w, http.StatusOK, page, p) }

// WriteMessage answers with status and a short page saying title and text
// (a payment not waiting, a bad form, an answer taken).
func WriteMessage(w http.ResponseWriter, status int, processor, title, text string) {
	write(w, status, messagePage, message{Processor: processor, Title: title, Message: text})
}

func write(w http.ResponseWriter, status int, t *template.Template, data any) {
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		// The templates are fixed and their data plain strings.
		panic("challenge: rendering " + t.Name() + ": " + err.Error())
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, b.String())
}
