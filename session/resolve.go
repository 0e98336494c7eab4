package session

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/tidwall/gjson"
)

// Config selects the signals a Resolver uses.
type Config struct {
	// Headers and BodyFields are user-added signals, tried before the
	// built-in signals of their kind.
	Headers    []Signal
	BodyFields []Signal
	// BuiltinRules adds BuiltinHeaders and BuiltinBodyFields.
	BuiltinRules bool
	// AutoDetect enables the conversation fingerprint.
	AutoDetect bool
	// Order lists the kinds to try; a kind left out is not used. Empty means
	// DefaultOrder.
	Order []Kind
	// MaxBody bounds the body read; 0 means DefaultMaxBody.
	MaxBody int64
	// Buffers is where bodies are read into, within its budget; nil
	// allocates a buffer per body, with no budget.
	Buffers *BufferPool
	// Linked returns the session that produced a stored response, by the
	// key of (scope, response id). With BuiltinRules, a body whose
	// previous_response_id is linked joins that session, after the other
	// body signals. Nil: no links.
	Linked func(response Key) (Key, bool)
}

// Resolver finds the session of a request. It is immutable after NewResolver
// and safe for concurrent use.
type Resolver struct {
	order   []Kind
	headers []headerSignal
	body    []bodySignal
	auto    bool
	maxBody int64
	buffers *BufferPool
	linked  func(Key) (Key, bool)
	// skimNames are the top-level body members one skim collects: the first
	// path component of every plain body signal, plus what the fingerprint
	// and the model need.
	skimNames []string
}

type headerSignal struct {
	name      string
	transform Transform
	source    string
}

type bodySignal struct {
	path      string
	transform Transform
	source    string
	// top is the first path component when it is a plain member name, and
	// rest the path below it (may be empty); top is empty when the path
	// needs gjson's full syntax on the whole body.
	top, rest string
}

// NewResolver checks c and builds a Resolver from it.
func NewResolver(c Config) (*Resolver, error) {
	r := &Resolver{auto: c.AutoDetect, maxBody: c.MaxBody, buffers: c.Buffers}
	if c.BuiltinRules {
		r.linked = c.Linked
	}
	if r.maxBody == 0 {
		r.maxBody = DefaultMaxBody
	}
	if r.maxBody < 0 {
		return nil, fmt.Errorf("max_body must not be negative")
	}
	headers := c.Headers
	bodyFields := c.BodyFields
	if c.BuiltinRules {
		headers = append(headers[:len(headers):len(headers)], BuiltinHeaders...)
		bodyFields = append(bodyFields[:len(bodyFields):len(bodyFields)], BuiltinBodyFields...)
	}
	for _, s := range headers {
		if s.Kind != KindHeaders {
			return nil, fmt.Errorf("signal %q is not a header signal", s.Name)
		}
		r.headers = append(r.headers, headerSignal{name: s.Name, transform: s.Transform, source: s.Source()})
	}
	r.skimNames = append(r.skimNames, "model")
	if r.linked != nil {
		r.skimNames = append(r.skimNames, previousResponseField)
	}
	if r.auto {
		r.skimNames = appendUnique(r.skimNames, fingerprintFields...)
	}
	for _, s := range bodyFields {
		if s.Kind != KindBody {
			return nil, fmt.Errorf("signal %q is not a body signal", s.Name)
		}
		bs := bodySignal{path: s.Name, transform: s.Transform, source: s.Source()}
		if top, rest, ok := plainTop(s.Name); ok {
			r.skimNames = appendUnique(r.skimNames, top)
			if len(r.skimNames) <= maxFields {
				bs.top, bs.rest = top, rest
			} else {
				r.skimNames = r.skimNames[:maxFields]
			}
		}
		r.body = append(r.body, bs)
	}

	order := c.Order
	if len(order) == 0 {
		order = DefaultOrder
	}
	seen := map[Kind]bool{}
	for _, k := range order {
		if k < KindHeaders || k > KindAuto {
			return nil, fmt.Errorf("unknown signal kind %d in order", k)
		}
		if seen[k] {
			return nil, fmt.Errorf("signal kind %s appears twice in order", k)
		}
		seen[k] = true
		if (k == KindHeaders && len(r.headers) > 0) || (k == KindBody && len(r.body) > 0) || (k == KindAuto && r.auto) {
			r.order = append(r.order, k)
		}
	}
	if len(r.order) == 0 {
		return nil, fmt.Errorf("no signal left to try: every kind in order is disabled or has no signals")
	}
	return r, nil
}

// appendUnique appends the names not yet in list.
func appendUnique(list []string, names ...string) []string {
	for _, n := range names {
		if !slices.Contains(list, n) {
			list = append(list, n)
		}
	}
	return list
}

// plainTop splits a gjson path into its first component and the rest when
// the first component is a plain member name (no wildcards, escapes,
// modifiers or queries), which lets the skim find it.
func plainTop(path string) (top, rest string, ok bool) {
	top, rest, _ = strings.Cut(path, ".")
	if top == "" || strings.ContainsAny(top, "*?\\#@|!=<>%[]{}()\"") {
		return "", "", false
	}
	return top, rest, true
}

// Result is what Resolve found.
type Result struct {
	// Session is valid when Found.
	Session
	Found bool
	// Skipped counts signals that were present but held an invalid value.
	Skipped int
	// BodyRead reports whether the body was read (and Model is meaningful).
	BodyRead bool
	// Unbuffered reports that the body was not read because the buffer
	// budget was used up; it streamed through, and only headers counted.
	Unbuffered bool
}

// Resolve finds the session of req under the given scope values. Kinds are
// tried in the configured order, signals within a kind in registry order;
// the first valid value wins. The body is read only when a body or auto
// signal is reached, and req.Body is then replaced by a reader of the
// identical bytes.
//
// A *BodyError means the body could not be read; the request must then be
// answered with an error rather than proxied.
func (r *Resolver) Resolve(req *http.Request, scope []string) (Result, error) {
	var res Result
	var f fields
	bodyOK := false // the body was captured and is a JSON object
	for _, kind := range r.order {
		switch kind {
		case KindHeaders:
			for i := range r.headers {
				s := &r.headers[i]
				vals := req.Header[s.name]
				if len(vals) == 0 {
					continue
				}
				id, ok := apply(s.transform, vals[0])
				if !ok {
					res.Skipped++
					continue
				}
				res.found(scope, id, s.source)
				return res, nil
			}
		case KindBody, KindAuto:
			if !res.BodyRead {
				body, refused, err := captureBody(req, captureRule{max: r.maxBody, pool: r.buffers})
				if err != nil {
					return res, err
				}
				res.Unbuffered = refused
				res.BodyRead = body != nil
				if res.BodyRead {
					f.names = r.skimNames
					bodyOK = f.skim(body)
					res.Model = modelOf(&f, req.URL.Path)
				}
			}
			if !bodyOK {
				continue
			}
			if kind == KindBody {
				if r.fromBody(&res, &f, scope) || r.fromLink(&res, &f, scope) {
					return res, nil
				}
				continue
			}
			if id, ok := fingerprint(&f, req.URL.Path, res.Model, scope); ok {
				res.found(scope, id, "auto")
				return res, nil
			}
		}
	}
	return res, nil
}

// Hold reads the body of req into a pooled buffer, whatever its type, when
// it is at most the resolver's max body and the budget allows, so that a
// retry of the request can send it again. It reports false when the budget
// refused it. A body read already is left as it is.
func (r *Resolver) Hold(req *http.Request) (bool, error) {
	_, refused, err := captureBody(req, captureRule{max: r.maxBody, pool: r.buffers, anyType: true})
	return !refused, err
}

func (res *Result) found(scope []string, id, source string) {
	res.Found = true
	res.ID = id
	res.Key = NewKey(scope, id)
	res.Source = source
}

// previousResponseField is the body member that names the stored response
// a Responses request continues.
const previousResponseField = "previous_response_id"

// fromLink joins the session of the stored response that the body's
// previous_response_id names, when that response is linked to one. The
// session's id is then the response id; its key is the linked session's.
func (r *Resolver) fromLink(res *Result, f *fields, scope []string) bool {
	if r.linked == nil {
		return false
	}
	raw := f.get(previousResponseField)
	if len(raw) == 0 || raw[0] != '"' {
		return false
	}
	id, ok := apply(TransformNone, gjson.ParseBytes(raw).Str)
	if !ok {
		return false
	}
	sess, ok := r.linked(NewKey(scope, id))
	if !ok {
		return false
	}
	res.Found, res.ID, res.Key, res.Source = true, id, sess, "body:"+previousResponseField
	return true
}

// fromBody tries the body signals in order against the skimmed members.
func (r *Resolver) fromBody(res *Result, f *fields, scope []string) bool {
	for i := range r.body {
		s := &r.body[i]
		var v gjson.Result
		if s.top == "" {
			v = gjson.GetBytes(f.body, s.path)
		} else {
			raw := f.get(s.top)
			if raw == nil {
				continue
			}
			if s.rest == "" {
				if raw[0] != '"' {
					continue
				}
				v = gjson.ParseBytes(raw)
			} else {
				v = gjson.GetBytes(raw, s.rest)
			}
		}
		if v.Type != gjson.String {
			continue
		}
		id, ok := apply(s.transform, v.Str)
		if !ok {
			res.Skipped++
			continue
		}
		res.found(scope, id, s.source)
		return true
	}
	return false
}
