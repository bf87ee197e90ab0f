package apiserver

import (
	"bytes"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	apitestingfuzzer "k8s.io/apimachinery/pkg/api/apitesting/fuzzer"
	metafuzzer "k8s.io/apimachinery/pkg/apis/meta/fuzzer"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	terrarunfuzzer "github.com/terrarun/terrarun/pkg/apis/terrarun/fuzzer"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// encodeAs encodes the internal object obj in v1alpha1 with the media type
// of codecs' serializer, as the API server encodes a response.
func encodeAs(t *testing.T, codecs runtime.NegotiatedSerializer, mediaType string, obj runtime.Object) []byte {
	t.Helper()
	info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), mediaType)
	if !ok {
		t.Fatalf("no serializer for %s", mediaType)
	}
	var buf bytes.Buffer
	enc := codecs.EncoderForVersion(info.Serializer, v1alpha1.SchemeGroupVersion)
	var err error
	if withAllocator, ok := enc.(runtime.EncoderWithAllocator); ok {
		err = withAllocator.EncodeWithAllocator(obj.DeepCopyObject(), &buf, &runtime.Allocator{})
	} else {
		err = enc.Encode(obj.DeepCopyObject(), &buf)
	}
	if err != nil {
		t.Fatalf("encoding a %T in %s: %v", obj, mediaType, err)
	}
	return buf.Bytes()
}

// TestListCacheEncodesAsTheSerializer: lists of runs and workspaces (fuzzed,
// and edge cases) encode to the same bytes with the list cache as without,
// in JSON and protobuf, with and without the streaming list encoders, when
// the cache is cold, when it holds every item, and after items change.
func TestListCacheEncodesAsTheSerializer(t *testing.T) {
	seed := rand.Int63()
	t.Logf("seed %d", seed)
	filler := apitestingfuzzer.FuzzerFor(apitestingfuzzer.MergeFuzzerFuncs(metafuzzer.Funcs, terrarunfuzzer.Funcs), rand.NewSource(seed), Codecs)

	var lists []runtime.Object
	for range 20 {
		runs := &terrarun.TerraformRunList{}
		filler.Fill(runs)
		workspaces := &terrarun.TerraformWorkspaceList{}
		filler.Fill(workspaces)
		lists = append(lists, runs, workspaces)
	}
	one := storedRun("a-run")
	two := storedRun("b-run")
	lists = append(lists,
		&terrarun.TerraformRunList{},                                 // nil items: null
		&terrarun.TerraformRunList{Items: []terrarun.TerraformRun{}}, // no items: []
		&terrarun.TerraformRunList{ListMeta: metav1.ListMeta{ResourceVersion: "9", Continue: "token"}, Items: []terrarun.TerraformRun{*one}},
		&terrarun.TerraformRunList{Items: []terrarun.TerraformRun{*one, *two, *one}}, // the same item twice
		&terrarun.TerraformRunList{Items: []terrarun.TerraformRun{{}}},               // no UID or resourceVersion: not cached
		&terrarun.TerraformWorkspaceList{Items: []terrarun.TerraformWorkspace{}},
	)

	plain := map[string]runtime.NegotiatedSerializer{
		"serializer":           serializer.NewCodecFactory(Scheme),
		"streaming serializer": serializer.NewCodecFactory(Scheme, serializer.WithStreamingCollectionEncodingToJSON(), serializer.WithStreamingCollectionEncodingToProtobuf()),
	}
	cached := groupSerializer{Codecs, newEncodingCache(DefaultListCacheBytes)}
	for _, mediaType := range []string{runtime.ContentTypeJSON, runtime.ContentTypeProtobuf} {
		for i, list := range lists {
			for round := range 2 { // cold, then warm
				got := encodeAs(t, cached, mediaType, list)
				for name, codecs := range plain {
					if want := encodeAs(t, codecs, mediaType, list); !bytes.Equal(got, want) {
						t.Fatalf("list %d (%T), %s, round %d: the list cache's encoding differs from the %s's:\n got %q\nwant %q", i, list, mediaType, round, name, got, want)
					}
				}
			}
		}
	}
	if cached.lists.entries.Len() == 0 {
		t.Fatal("the cache holds nothing after every list was encoded twice")
	}

	// A run that changed has a new resourceVersion, and is encoded again.
	changed := one.DeepCopy()
	changed.Status.Phase = terrarun.RunPhaseSucceeded
	changed.ResourceVersion = "8"
	list := &terrarun.TerraformRunList{Items: []terrarun.TerraformRun{*changed, *two}}
	for _, mediaType := range []string{runtime.ContentTypeJSON, runtime.ContentTypeProtobuf} {
		got := encodeAs(t, cached, mediaType, list)
		if want := encodeAs(t, Codecs, mediaType, list); !bytes.Equal(got, want) {
			t.Fatalf("%s: a run at a new resourceVersion is listed as it was:\n got %q\nwant %q", mediaType, got, want)
		}
	}
}

// TestListCacheServesKeptEncodings: the second LIST of an unchanged run
// writes the encoding kept by the first. The cache keys an encoding by UID
// and resourceVersion, so a run changed without a new resourceVersion (which
// storage never returns) shows how it was first listed.
func TestListCacheServesKeptEncodings(t *testing.T) {
	cached := groupSerializer{Codecs, newEncodingCache(DefaultListCacheBytes)}
	run := storedRun("a-run")
	list := &terrarun.TerraformRunList{Items: []terrarun.TerraformRun{*run}}
	first := encodeAs(t, cached, runtime.ContentTypeJSON, list)
	list.Items[0].Spec.Workspace = "not-listed"
	again := encodeAs(t, cached, runtime.ContentTypeJSON, list)
	if !bytes.Equal(first, again) {
		t.Fatalf("the second LIST encoded the run again:\n%s\n%s", first, again)
	}
	if off := encodeAs(t, groupSerializer{Codecs, newEncodingCache(0)}, runtime.ContentTypeJSON, list); !strings.Contains(string(off), "not-listed") {
		t.Fatalf("with --list-cache-bytes=0 the run was not encoded as it is: %s", off)
	}
}

// TestEncodingCacheBounds: the cache holds at most its bytes, keeps one
// version of an object, and lets the least recently used go first.
func TestEncodingCacheBounds(t *testing.T) {
	const item = 1000
	c := newEncodingCache(10 * (item + entryOverhead))
	key := func(i int) cacheKey { return cacheKey{"json", types.UID(fmt.Sprint("uid-", i))} }
	data := bytes.Repeat([]byte("x"), item)
	for i := range 10 {
		c.put(key(i), "1", data)
	}
	if _, ok := c.get(key(0), "1"); !ok { // 0 is now the most recently used
		t.Fatal("the cache dropped an entry while it had room")
	}
	c.put(key(3), "2", data) // a new version replaces the old one
	if _, ok := c.get(key(3), "1"); ok {
		t.Fatal("the cache kept an object's old version")
	}
	if c.entries.Len() != 10 || c.size != 10*(item+entryOverhead) {
		t.Fatalf("after a new version: %d entries, %d bytes; want 10 and %d", c.entries.Len(), c.size, 10*(item+entryOverhead))
	}
	c.put(key(10), "1", data)
	if c.size > c.max {
		t.Fatalf("the cache holds %d bytes, more than its %d", c.size, c.max)
	}
	if _, ok := c.get(key(1), "1"); ok {
		t.Fatal("the least recently used entry was kept instead of dropped")
	}
	for _, i := range []int{0, 10} {
		if _, ok := c.get(key(i), "1"); !ok {
			t.Fatalf("entry %d was dropped before the least recently used", i)
		}
	}
	c.put(key(11), "1", make([]byte, c.max)) // larger than the cache: not kept
	if _, ok := c.get(key(11), "1"); ok || c.size > c.max {
		t.Fatalf("an encoding larger than the cache was kept (%d bytes held)", c.size)
	}
}
