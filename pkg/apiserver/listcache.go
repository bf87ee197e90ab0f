package apiserver

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/lru"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/metrics"
)

// DefaultListCacheBytes is how many bytes of encoded runs and workspaces a
// server keeps for its LIST responses unless --list-cache-bytes says
// otherwise: some 50,000 runs as created, in one format (a finished run's
// encoding is two to three times larger).
const DefaultListCacheBytes = 64 << 20

// listCaching is one of the group's serializers (JSON or protobuf) with the
// items of lists of runs and workspaces encoded once per resourceVersion: a
// LIST writes what an earlier LIST wrote for every item that has not
// changed since, and encodes only the others. The output is byte for byte
// the serializer's. Everything else (single objects, watch events, lists
// without items) goes to the serializer as it is.
//
// An item's encoding is a function of its UID and resourceVersion because
// list items come from storage, unchanged: the registry decorates nothing,
// and v1alpha1 is the only version served.
type listCaching struct {
	runtime.Serializer
	format *listFormat
	cache  *encodingCache
}

// listFormat is how one media type encodes an item and frames a list.
type listFormat struct {
	// name tells the formats' entries apart in the cache they share.
	name string
	// item encodes one item as it appears in a list.
	item func(runtime.Object) ([]byte, error)
	// list writes the list obj, whose items' encodings are items.
	list func(s listCaching, obj runtime.Object, items [][]byte, w io.Writer) error
}

// Encode implements runtime.Encoder.
func (s listCaching) Encode(obj runtime.Object, w io.Writer) error {
	return s.EncodeWithAllocator(obj, w, nil)
}

// EncodeWithAllocator implements runtime.EncoderWithAllocator, which the
// protobuf serializer implements to reuse its buffers across responses.
func (s listCaching) EncodeWithAllocator(obj runtime.Object, w io.Writer, memAlloc runtime.MemoryAllocator) error {
	if s.cache != nil {
		if items, ok := listItems(obj); ok {
			encoded, err := s.items(items)
			if err != nil {
				return err
			}
			return s.format.list(s, obj, encoded, w)
		}
	}
	if e, ok := s.Serializer.(runtime.EncoderWithAllocator); ok && memAlloc != nil {
		return e.EncodeWithAllocator(obj, w, memAlloc)
	}
	return s.Serializer.Encode(obj, w)
}

// cachedItem is what a list item of a cached list is.
type cachedItem interface {
	runtime.Object
	metav1.Object
}

// listItems returns the items of a list of runs or workspaces, or false for
// anything else and for lists whose Items are nil (which encode as null).
func listItems(obj runtime.Object) ([]cachedItem, bool) {
	switch list := obj.(type) {
	case *v1alpha1.TerraformRunList:
		return pointers(list.Items)
	case *v1alpha1.TerraformWorkspaceList:
		return pointers(list.Items)
	}
	return nil, false
}

// pointers returns pointers to the elements of items, or false when items
// is nil.
func pointers[T any, P interface {
	*T
	cachedItem
}](items []T) ([]cachedItem, bool) {
	if items == nil {
		return nil, false
	}
	out := make([]cachedItem, len(items))
	for i := range items {
		out[i] = P(&items[i])
	}
	return out, true
}

// items returns the encodings of items, from the cache or made and kept.
func (s listCaching) items(items []cachedItem) ([][]byte, error) {
	encoded := make([][]byte, len(items))
	var hits, misses int
	for i, item := range items {
		key := cacheKey{s.format.name, item.GetUID()}
		data, ok := s.cache.get(key, item.GetResourceVersion())
		if ok {
			hits++
		} else {
			misses++
			var err error
			if data, err = s.format.item(item); err != nil {
				return nil, err
			}
			s.cache.put(key, item.GetResourceVersion(), data)
		}
		encoded[i] = data
	}
	metrics.ListCacheItems.WithLabelValues(s.format.name, "hit").Add(float64(hits))
	metrics.ListCacheItems.WithLabelValues(s.format.name, "miss").Add(float64(misses))
	return encoded, nil
}

// jsonListEnd ends the JSON serializer's encoding of a list with no items.
var jsonListEnd = []byte("]}\n")

// jsonList frames items as the JSON serializer does: its own encoding of
// the list without items up to the items' opening bracket, the items
// separated by commas, and the end.
var jsonList = &listFormat{
	name: "json",
	item: func(obj runtime.Object) ([]byte, error) { return json.Marshal(obj) },
	list: func(s listCaching, obj runtime.Object, items [][]byte, w io.Writer) error {
		var head bytes.Buffer
		if err := s.Serializer.Encode(withoutItems(obj), &head); err != nil {
			return err
		}
		prefix, ok := bytes.CutSuffix(head.Bytes(), jsonListEnd)
		if !ok {
			return fmt.Errorf("encoding a %T: the JSON serializer's list does not end in %q", obj, jsonListEnd)
		}
		// A bufio.Writer keeps its first error, for Flush to return.
		out := bufio.NewWriterSize(w, 64<<10)
		out.Write(prefix)
		for i, item := range items {
			if i > 0 {
				out.WriteByte(',')
			}
			out.Write(item)
		}
		out.Write(jsonListEnd)
		return out.Flush()
	},
}

// withoutItems returns a copy of the list obj (a run or workspace list) with
// empty, non-nil Items.
func withoutItems(obj runtime.Object) runtime.Object {
	switch list := obj.(type) {
	case *v1alpha1.TerraformRunList:
		header := *list
		header.Items = []v1alpha1.TerraformRun{}
		return &header
	case *v1alpha1.TerraformWorkspaceList:
		header := *list
		header.Items = []v1alpha1.TerraformWorkspace{}
		return &header
	}
	panic(fmt.Sprintf("withoutItems: %T is not a list of runs or workspaces", obj))
}

// protobufPrefix begins every protobuf-encoded object (the protobuf
// serializer's magic number).
var protobufPrefix = []byte{'k', '8', 's', 0}

// protobufList frames items as the protobuf serializer does: its prefix, and
// a runtime.Unknown whose Raw is the list (ListMeta as field 1, each item as
// field 2).
var protobufList = &listFormat{
	name: "protobuf",
	item: func(obj runtime.Object) ([]byte, error) {
		m, ok := obj.(interface{ Marshal() ([]byte, error) })
		if !ok {
			return nil, fmt.Errorf("%T has no protobuf encoding", obj)
		}
		return m.Marshal()
	},
	list: func(s listCaching, obj runtime.Object, items [][]byte, w io.Writer) error {
		listMeta, err := obj.(metav1.ListMetaAccessor).GetListMeta().(*metav1.ListMeta).Marshal()
		if err != nil {
			return err
		}
		size := protobufFieldSize(listMeta)
		for _, item := range items {
			size += protobufFieldSize(item)
		}
		gvk := obj.GetObjectKind().GroupVersionKind()
		unknown := runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind}}
		// A bufio.Writer keeps its first error, for Flush to return.
		out := bufio.NewWriterSize(w, 64<<10)
		out.Write(protobufPrefix)
		if _, err := unknown.MarshalToWriter(out, size, func(w io.Writer) (int, error) {
			n := writeProtobufField(w, 1, listMeta)
			for _, item := range items {
				n += writeProtobufField(w, 2, item)
			}
			return n, nil
		}); err != nil {
			return err
		}
		return out.Flush()
	},
}

// protobufFieldSize is the size of a length-delimited field of a field
// number below 16 that holds data.
func protobufFieldSize(data []byte) int {
	var varint [binary.MaxVarintLen64]byte
	return 1 + binary.PutUvarint(varint[:], uint64(len(data))) + len(data)
}

// writeProtobufField writes data as the length-delimited field number field
// (below 16) to w, a bufio.Writer that keeps any error, and returns the
// bytes written.
func writeProtobufField(w io.Writer, field byte, data []byte) int {
	var header [1 + binary.MaxVarintLen64]byte
	header[0] = field<<3 | 2
	n := 1 + binary.PutUvarint(header[1:], uint64(len(data)))
	w.Write(header[:n])
	w.Write(data)
	return n + len(data)
}

// cacheKey names an object's entry in one format.
type cacheKey struct {
	format string
	uid    types.UID
}

// encodingCache holds objects' encodings at one resourceVersion each, up to
// a number of bytes; the least recently used go first.
type encodingCache struct {
	mu      sync.Mutex
	entries *lru.Cache // cacheKey → cachedEncoding
	size    int        // bytes held, entryOverhead included
	max     int
}

// entryOverhead approximates what an entry costs beyond its encoding: its
// key and resourceVersion, the LRU list's element and the map's slot.
const entryOverhead = 160

type cachedEncoding struct {
	resourceVersion string
	data            []byte
}

func (e cachedEncoding) size() int { return len(e.data) + entryOverhead }

// newEncodingCache returns a cache of at most maxBytes, or nil (nothing
// cached) when maxBytes is 0.
func newEncodingCache(maxBytes int) *encodingCache {
	if maxBytes <= 0 {
		return nil
	}
	c := &encodingCache{max: maxBytes}
	c.entries = lru.NewWithEvictionFunc(0, func(_ lru.Key, v any) { c.size -= v.(cachedEncoding).size() })
	return c
}

// get returns the encoding of key's object at resourceVersion rv.
func (c *encodingCache) get(key cacheKey, rv string) ([]byte, bool) {
	if key.uid == "" || rv == "" {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.entries.Get(key)
	if !ok || v.(cachedEncoding).resourceVersion != rv {
		return nil, false
	}
	return v.(cachedEncoding).data, true
}

// put records data as the encoding of key's object at resourceVersion rv,
// in place of any other of its versions.
func (c *encodingCache) put(key cacheKey, rv string, data []byte) {
	e := cachedEncoding{resourceVersion: rv, data: data}
	if key.uid == "" || rv == "" || e.size() > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries.Remove(key) // the eviction function takes the old version's size off
	c.entries.Add(key, e)
	c.size += e.size()
	for c.size > c.max {
		c.entries.RemoveOldest()
	}
	metrics.ListCacheBytes.Set(float64(c.size))
}
