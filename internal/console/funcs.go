package console

import (
	"html/template"
	"time"

	"github.com/modelgateway/gateway/internal/pricing"
)

// funcs are the helpers the templates use. Templates escape everything they
// print; none of these returns markup.
var funcs = template.FuncMap{
	"usd": pricing.FormatUSD,
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "–"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
}
