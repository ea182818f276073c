package distlockotel

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Attribute keys of the metrics.
const (
	attrOutcome = attribute.Key("outcome")
	attrHow     = attribute.Key("how")
	attrCause   = attribute.Key("cause")
	attrLock    = attribute.Key("lock")
	attrNode    = attribute.Key("node")
)

var howNames = [4]string{"", "free", "handed_over", "after_wait"}

// labelAttrs holds the measurement options of every attribute combination
// for one key label, built once so that recording allocates nothing. Each
// is a one-element slice, passed with ..., so that no variadic slice is
// made per call either.
type labelAttrs struct {
	acquire  [nOutcomes][len(howNames)][]metric.RecordOption
	wait     [len(howNames)][]metric.RecordOption
	hold     [nCauses][]metric.RecordOption
	loss     [nCauses][]metric.AddOption
	plainAdd []metric.AddOption // just the label, or nothing
}

// newLabelAttrs builds the options for label (none when !hasLabel).
func newLabelAttrs(label string, hasLabel bool) *labelAttrs {
	var base []attribute.KeyValue
	if hasLabel {
		base = []attribute.KeyValue{attrLock.String(label)}
	}
	set := func(kvs ...attribute.KeyValue) metric.MeasurementOption {
		return metric.WithAttributeSet(attribute.NewSet(append(kvs, base...)...))
	}
	rec := func(kvs ...attribute.KeyValue) []metric.RecordOption {
		return []metric.RecordOption{set(kvs...)}
	}
	a := &labelAttrs{}
	for out, name := range outcomeNames {
		a.acquire[out][0] = rec(attrOutcome.String(name))
		if out == outcomeAcquired {
			for how := 1; how < len(howNames); how++ {
				a.acquire[out][how] = rec(attrOutcome.String(name), attrHow.String(howNames[how]))
			}
		}
	}
	a.wait[0] = rec()
	for how := 1; how < len(howNames); how++ {
		a.wait[how] = rec(attrHow.String(howNames[how]))
	}
	for c, name := range causeNames {
		a.hold[c] = rec(attrCause.String(name))
		a.loss[c] = []metric.AddOption{set(attrCause.String(name))}
	}
	if hasLabel {
		a.plainAdd = []metric.AddOption{set()}
	}
	return a
}

// attrs returns the measurement options for key's label.
func (o *Observer) attrs(key string) *labelAttrs {
	if o.keyLabel == nil {
		return o.plain
	}
	label := o.keyLabel(key)
	o.mu.RLock()
	a := o.labels[label]
	o.mu.RUnlock()
	if a != nil {
		return a
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if a = o.labels[label]; a == nil {
		a = newLabelAttrs(label, true)
		o.labels[label] = a
	}
	return a
}

// node returns the measurement options for quorum node i.
func (o *Observer) node(i int) []metric.AddOption {
	if i < 0 {
		return nodeAttr(i)
	}
	o.mu.RLock()
	known := i < len(o.nodes)
	o.mu.RUnlock()
	if !known {
		o.mu.Lock()
		for len(o.nodes) <= i {
			o.nodes = append(o.nodes, nodeAttr(len(o.nodes)))
		}
		o.mu.Unlock()
	}
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.nodes[i]
}

func nodeAttr(i int) []metric.AddOption {
	return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attrNode.Int(i)))}
}
