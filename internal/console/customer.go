package console

import (
	"bytes"
	"embed"
	"html/template"
	"io/fs"
	"net/http"
)

//go:embed assets templates
var files embed.FS

// assets are the static files both consoles serve: the style sheet, the
// customer page's script and the vendored chart library.
var assets = func() fs.FS {
	sub, err := fs.Sub(files, "assets")
	if err != nil {
		panic(err)
	}
	return sub
}()

var templates = template.Must(template.New("").Funcs(funcs).ParseFS(files, "templates/*.html"))

// contentSecurityPolicy allows nothing inline and nothing from elsewhere:
// scripts, styles and images come from this origin only, and the pages
// cannot be framed.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// secureHeaders sets the headers every console response carries.
func secureHeaders(h http.Header) {
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	// same-origin, not no-referrer: with no-referrer a browser sends
	// "Origin: null" on the console's own form posts.
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
}

// staticHandler serves the embedded assets under prefix.
func staticHandler(prefix string) http.Handler {
	fsrv := http.StripPrefix(prefix, http.FileServerFS(assets))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		secureHeaders(w.Header())
		w.Header().Set("Cache-Control", "no-cache")
		fsrv.ServeHTTP(w, r)
	})
}

// render writes template name of t to a buffer first, so that a failure
// is a 500 rather than half a page; it returns the template's error.
func render(w http.ResponseWriter, code int, t *template.Template, name string, data any) error {
	var b bytes.Buffer
	if err := t.ExecuteTemplate(&b, name, data); err != nil {
		http.Error(w, "internal error", http.StatusInternalServerError)
		return err
	}
	secureHeaders(w.Header())
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	w.Write(b.Bytes())
	return nil
}

// CustomerPath is where the customer page is served.
const CustomerPath = "/console/"

func mountCustomer(mux Mux, sso bool) {
	mux.Handle(CustomerPath+"static/", staticHandler(CustomerPath+"static/"))
	mux.HandleFunc(CustomerPath, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != CustomerPath {
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		render(w, http.StatusOK, templates, "customer.html", struct {
			Static string
			SSO    bool
		}{CustomerPath + "static", sso})
	})
	mux.HandleFunc("/console", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, CustomerPath, http.StatusMovedPermanently)
	})
}
