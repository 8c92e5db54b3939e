// Package capability declares what an agent adapter can observe, so that no
// surface claims more coverage for a host than its integration exposes.
package capability

// Field is one kind of fact an adapter may observe.
type Field struct {
	Name string `json:"name"`
	// Available is true when the host integration exposes the field.
	Available bool   `json:"available"`
	Note      string `json:"note,omitempty"`
}

// Declaration is an adapter's capability declaration.
type Declaration struct {
	Agent string `json:"agent"`
	// CompleteCapture is true only when the adapter can ever report a
	// session as completely captured within its supported visible scope.
	CompleteCapture bool    `json:"complete_capture"`
	Summary         string  `json:"summary"`
	Fields          []Field `json:"fields"`
}

// Available returns the names of the available fields, in order.
func (d Declaration) Available() []string { return d.names(true) }

// Unavailable returns the names of the unavailable fields, in order.
func (d Declaration) Unavailable() []string { return d.names(false) }

func (d Declaration) names(avail bool) []string {
	out := []string{}
	for _, f := range d.Fields {
		if f.Available == avail {
			out = append(out, f.Name)
		}
	}
	return out
}
