package unsupported

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"

	"github.com/bulwark-mesh/bulwark/internal/kubewatch"
	"github.com/bulwark-mesh/bulwark/pkg/policy"
)

// DefaultPoll is how often the apiserver is asked again for the CRDs of
// kinds not served yet.
const DefaultPoll = 30 * time.Second

// Discovery is the part of the apiserver's discovery the reporter asks
// which kinds it serves.
type Discovery interface {
	ServerGroups() (*metav1.APIGroupList, error)
	ServerResourcesForGroupVersion(groupVersion string) (*metav1.APIResourceList, error)
}

// Config configures a Reporter.
type Config struct {
	Discovery Discovery
	// Dynamic reads the objects whose content decides what is ignored;
	// Metadata, the objects of kinds not read at all, of which only the
	// name is needed.
	Dynamic  dynamic.Interface
	Metadata metadata.Interface
	// Kinds are the kinds watched; default policy.Reported().
	Kinds []policy.Kind
	// Poll is how often kinds not served yet are looked for again;
	// default DefaultPoll.
	Poll   time.Duration
	Logger *slog.Logger
}

// Reporter watches, read-only, the objects of the kinds Bulwark does not
// honour in full, and says which are ignored and how: a log line per
// object and change, a gauge per kind, and a list (Report).
type Reporter struct {
	cfg Config

	mu      sync.Mutex
	watched []*watch // in the order of cfg.Kinds
	missing []policy.Kind
}

// watch is the informer of one kind the apiserver serves.
type watch struct {
	kind     policy.Kind
	version  string
	informer cache.SharedIndexInformer
	// whole is what is ignored of each object of a kind not read at
	// all: one slice shared by all its records.
	whole []string
}

// New returns a reporter for cfg. It does no I/O and starts nothing.
func New(cfg Config) *Reporter {
	if cfg.Kinds == nil {
		cfg.Kinds = policy.Reported()
	}
	cfg.Poll = cmp.Or(cfg.Poll, DefaultPoll)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Reporter{cfg: cfg, missing: slices.Clone(cfg.Kinds)}
}

// Run looks for the kinds' CRDs and watches each kind the apiserver
// serves, until ctx is done; kinds not served are looked for again every
// Poll. A failure of discovery is logged and retried: the reporter never
// stops istiod.
func (r *Reporter) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	first := true
	for {
		started, err := r.discover(first)
		switch {
		case err != nil:
			r.cfg.Logger.Warn("cannot ask the API server which Istio kinds it serves; retrying", "retry_in", r.cfg.Poll, "err", err)
		default:
			first = false
		}
		for _, w := range started {
			wg.Add(1)
			go func() { defer wg.Done(); w.informer.RunWithContext(ctx) }()
		}
		if err == nil && r.done() {
			<-ctx.Done()
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(r.cfg.Poll):
		}
	}
}

func (r *Reporter) done() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.missing) == 0
}

// discover makes the informers of the missing kinds the apiserver now
// serves, at the version it prefers, and returns them, not started. The
// first time it answers, it logs the kinds not served.
func (r *Reporter) discover(first bool) ([]*watch, error) {
	r.mu.Lock()
	missing := slices.Clone(r.missing)
	r.mu.Unlock()
	groups, err := r.cfg.Discovery.ServerGroups()
	if err != nil {
		return nil, fmt.Errorf("server groups: %w", err)
	}
	resources := map[string][]metav1.APIResource{} // by group version, asked once
	served := func(gv string) ([]metav1.APIResource, error) {
		if l, ok := resources[gv]; ok {
			return l, nil
		}
		list, err := r.cfg.Discovery.ServerResourcesForGroupVersion(gv)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, fmt.Errorf("group version %s: %w", gv, err)
		case list != nil:
			resources[gv] = list.APIResources
		}
		return resources[gv], nil
	}
	var started []*watch
	var still []policy.Kind
	for i, k := range missing {
		version, err := servedVersion(groups, k, served)
		var w *watch
		if err == nil && version != "" {
			w, err = r.newWatch(k, version)
		}
		switch {
		case err != nil:
			// This kind and those after it wait for the next try.
			return started, r.keep(started, append(still, missing[i:]...), err)
		case w == nil:
			still = append(still, k)
		default:
			started = append(started, w)
		}
	}
	if len(started) > 0 {
		r.cfg.Logger.Info("reporting what Bulwark ignores of the objects of these CRDs", "crds", crdNames(started))
	}
	if first && len(still) > 0 {
		names := make([]string, len(still))
		for i, k := range still {
			names[i] = k.CRD()
		}
		r.cfg.Logger.Info("CRDs not installed; looked for again every poll", "crds", strings.Join(names, ","), "poll", r.cfg.Poll)
	}
	return started, r.keep(started, still, nil)
}

// crdNames names the CRDs of ws, each with the version watched.
func crdNames(ws []*watch) string {
	names := make([]string, len(ws))
	for i, w := range ws {
		names[i] = w.kind.CRD() + "/" + w.version
	}
	return strings.Join(names, ",")
}

// keep records the watches made and the kinds still missing.
func (r *Reporter) keep(started []*watch, still []policy.Kind, err error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.watched = append(r.watched, started...)
	r.missing = still
	return err
}

// servedVersion is the version of k's group the apiserver serves k in,
// preferred version first; "" when none.
func servedVersion(groups *metav1.APIGroupList, k policy.Kind, served func(gv string) ([]metav1.APIResource, error)) (string, error) {
	i := slices.IndexFunc(groups.Groups, func(g metav1.APIGroup) bool { return g.Name == k.Group })
	if i < 0 {
		return "", nil
	}
	g := groups.Groups[i]
	versions := []string{g.PreferredVersion.Version}
	for _, v := range g.Versions {
		versions = append(versions, v.Version)
	}
	for _, v := range versions {
		if v == "" {
			continue
		}
		list, err := served(g.Name + "/" + v)
		if err != nil {
			return "", err
		}
		if slices.ContainsFunc(list, func(res metav1.APIResource) bool { return res.Name == k.Resource }) {
			return v, nil
		}
	}
	return "", nil
}

// newWatch makes the informer of k at version: of whole objects, reduced
// to a record as they arrive, when what is ignored depends on their
// content; of their metadata alone otherwise.
func (r *Reporter) newWatch(k policy.Kind, version string) (*watch, error) {
	gvr := schema.GroupVersionResource{Group: k.Group, Version: version, Resource: k.Resource}
	w := &watch{kind: k, version: version}
	if k.NeedsSpec() {
		w.informer = dynamicinformer.NewFilteredDynamicInformer(r.cfg.Dynamic, gvr, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
	} else {
		w.whole = k.Ignored(nil, nil)
		w.informer = metadatainformer.NewFilteredMetadataInformer(r.cfg.Metadata, gvr, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
	}
	if err := w.informer.SetTransform(w.transform); err != nil {
		return nil, fmt.Errorf("watch %s: %w", k.CRD(), err)
	}
	if _, err := w.informer.AddEventHandler(handler{w: w, log: r.cfg.Logger}); err != nil {
		return nil, fmt.Errorf("watch %s: %w", k.CRD(), err)
	}
	if err := w.informer.SetWatchErrorHandlerWithContext(kubewatch.ErrorLogger(r.cfg.Logger, k.CRD())); err != nil {
		return nil, fmt.Errorf("watch %s: %w", k.CRD(), err)
	}
	return w, nil
}

// watches returns the watches made so far.
func (r *Reporter) watches() []*watch {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.watched)
}

// HasSynced reports whether every kind served when last asked has been
// listed whole.
func (r *Reporter) HasSynced() bool {
	for _, w := range r.watches() {
		if !w.informer.HasSynced() {
			return false
		}
	}
	return true
}

// Message is the log line of an object Bulwark does not honour in full.
const Message = "Istio configuration not honoured"

// handler logs each object Bulwark ignores something of, once per
// change: when it appears, when its spec or what is ignored changes, and
// when it goes.
type handler struct {
	w   *watch
	log *slog.Logger
}

var _ cache.ResourceEventHandler = handler{}

func (h handler) OnAdd(obj any, _ bool) {
	if rec, ok := obj.(*record); ok && len(rec.ignored) > 0 {
		h.report(rec)
	}
}

func (h handler) OnUpdate(oldObj, newObj any) {
	o, okOld := oldObj.(*record)
	n, okNew := newObj.(*record)
	if !okOld || !okNew || o.sameAs(n) {
		return
	}
	switch {
	case len(n.ignored) > 0:
		h.report(n)
	case len(o.ignored) > 0:
		h.log.Info("Istio configuration now honoured in full", "kind", h.w.kind.Name, "group", h.w.kind.Group, "object", n.ref())
	}
}

func (h handler) OnDelete(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if rec, ok := obj.(*record); ok && len(rec.ignored) > 0 {
		h.log.Info("Istio configuration not honoured is gone", "kind", h.w.kind.Name, "group", h.w.kind.Group, "object", rec.ref())
	}
}

func (h handler) report(rec *record) {
	h.log.Warn(Message, "kind", h.w.kind.Name, "group", h.w.kind.Group, "object", rec.ref(),
		"ignored", strings.Join(rec.ignored, "; "))
}
