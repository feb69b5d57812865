package ingest

import (
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/mediaworker/mediaworker/contracts"
)

// An AWS-shaped notification, as versitygw sends it (s3event.createEventSchema): the key escaped as
// a query value.
const awsEvent = `{"Records":[{"eventVersion":"2.2","eventSource":"aws:s3","awsRegion":"us-east-1",
"eventTime":"2026-11-28T00:00:00Z","eventName":"s3:ObjectCreated:Put","userIdentity":{"PrincipalId":"u"},
"s3":{"s3SchemaVersion":"1.0","bucket":{"name":"media","arn":"arn:aws:s3:::media"},
"object":{"key":"uploads/u1/my+photo%C3%BC.jpg","size":1234,"eTag":"\"d41d8cd98f00b204e9800998ecf8427e\"","sequencer":"0A1B"}}}]}`

// MinIO's wrapper, from its documented format (docs/bucket/notifications): EventName and Key beside
// the same Records; eventName with the s3: prefix, the key escaped, userMetadata with the headers.
const minioEvent = `{"EventName":"s3:ObjectCreated:Put","Key":"media/uploads/u1/my photoü.jpg","Records":[{
"eventVersion":"2.0","eventSource":"minio:s3","awsRegion":"","eventTime":"2026-11-28T00:00:00.123Z",
"eventName":"s3:ObjectCreated:Put","userIdentity":{"principalId":"minio"},"requestParameters":{},
"responseElements":{},"s3":{"s3SchemaVersion":"1.0","configurationId":"Config","bucket":{"name":"media",
"ownerIdentity":{"principalId":"minio"},"arn":"arn:aws:s3:::media"},"object":{"key":"uploads%2Fu1%2Fmy+photo%C3%BC.jpg",
"size":1234,"eTag":"d41d8cd98f00b204e9800998ecf8427e","contentType":"image/jpeg",
"userMetadata":{"content-type":"image/jpeg"},"sequencer":"17B"}},"source":{"host":"","port":"","userAgent":""}}]}`

func mapper(t *testing.T, routes string) Mapper {
	t.Helper()
	rs, err := ParseRoutes(routes)
	if err != nil {
		t.Fatal(err)
	}
	return Mapper{Routes: rs, Quarantine: "quarantine"}
}

func mapOne(t *testing.T, m Mapper, event string) (contracts.Request, Verdict, error) {
	t.Helper()
	recs, bad, err := ParseS3Event([]byte(event))
	if err != nil || len(bad) > 0 || len(recs) != 1 {
		t.Fatalf("parsing: %d records, %v, %v", len(recs), bad, err)
	}
	return m.Map(recs[0])
}

// Both shapes of one upload map to the same request: same mediaId (a version-5 UUID of bucket, key and
// ETag), the key unescaped, the recipe of the route, a valid request with its source.
func TestAWSAndMinIOShapesMapToTheSameRequest(t *testing.T) {
	m := mapper(t, "media/uploads/*.jpg=avatar")
	aws, v, err := mapOne(t, m, awsEvent)
	if v != Publish {
		t.Fatalf("AWS shape: %v %v", v, err)
	}
	mio, v, err := mapOne(t, m, minioEvent)
	if v != Publish {
		t.Fatalf("MinIO shape: %v %v", v, err)
	}
	const key = "uploads/u1/my photoü.jpg"
	if aws.S3Key != key || mio.S3Key != key || aws.S3Bucket != "media" {
		t.Fatalf("keys %q and %q, want %q", aws.S3Key, mio.S3Key, key)
	}
	if aws.MediaID != mio.MediaID {
		t.Fatalf("the same upload has two mediaIds: %s and %s", aws.MediaID, mio.MediaID)
	}
	want := uuid.NewSHA1(Namespace, []byte("media\n"+key+"\ne:d41d8cd98f00b204e9800998ecf8427e")).String()
	if aws.MediaID != want {
		t.Fatalf("mediaId %s, want %s (the documented derivation)", aws.MediaID, want)
	}
	if u := uuid.MustParse(aws.MediaID); u.Version() != 5 {
		t.Fatalf("mediaId is version %d, want 5", u.Version())
	}
	if aws.Recipe != "avatar" || aws.MediaURL != "s3://media/uploads/u1/my%20photo%C3%BC.jpg" {
		t.Fatalf("recipe %q, mediaUrl %q", aws.Recipe, aws.MediaURL)
	}
	if aws.Source == nil || aws.Source.Kind != contracts.SourceS3Event || aws.Source.Key != key || aws.Source.ETag != "d41d8cd98f00b204e9800998ecf8427e" || aws.Source.Size != 1234 {
		t.Fatalf("source %+v", aws.Source)
	}
	if err := contracts.Validate(contracts.SchemaRequest, aws); err != nil {
		t.Fatalf("the request fails its schema: %v", err)
	}
	// AWS's own eventName has no s3: prefix; it is the same event.
	plain := strings.Replace(awsEvent, `"s3:ObjectCreated:Put"`, `"ObjectCreated:CompleteMultipartUpload"`, 1)
	if r, v, _ := mapOne(t, m, plain); v != Publish || r.MediaID != aws.MediaID {
		t.Fatalf("AWS's unprefixed eventName: %v %s", v, r.MediaID)
	}
}

// A new version of the key is a new request; a re-sent event the same one.
func TestMediaIDFollowsTheVersion(t *testing.T) {
	a := MediaID("media", "k.jpg", "", `"etag1"`)
	if a != MediaID("media", "k.jpg", "", "etag1") {
		t.Fatal("quotes around the ETag change the mediaId")
	}
	for _, other := range []string{
		MediaID("media", "k.jpg", "", "etag2"), MediaID("media", "k.jpg", "v1", "etag1"),
		MediaID("media2", "k.jpg", "", "etag1"), MediaID("media", "k2.jpg", "", "etag1"),
	} {
		if other == a {
			t.Fatal("two versions share a mediaId")
		}
	}
	if MediaID("media", "k.jpg", "v1", "x") != MediaID("media", "k.jpg", "v1", "y") {
		t.Fatal("with a version ID the ETag must not matter")
	}
}

// Other event types, unwatched buckets and prefixes, the worker's outputs and the quarantine start
// nothing; records the worker cannot use are malformed, never fatal.
func TestMapVerdicts(t *testing.T) {
	m := mapper(t, "media/uploads/,photos")
	id := "550e8400-e29b-41d4-a716-446655440000"
	rec := func(mut func(*Record)) Record {
		r := Record{Kind: kindS3, EventName: "s3:ObjectCreated:Put", Bucket: "media", Key: "uploads/a.jpg", ETag: "e"}
		mut(&r)
		return r
	}
	cases := []struct {
		name string
		rec  Record
		want Verdict
	}{
		{"put", rec(func(*Record) {}), Publish},
		{"copy", rec(func(r *Record) { r.EventName = "s3:ObjectCreated:Copy" }), Publish},
		{"whole bucket", rec(func(r *Record) { r.Bucket, r.Key = "photos", "x/y.png" }), Publish},
		{"delete", rec(func(r *Record) { r.EventName = "s3:ObjectRemoved:Delete" }), Ignored},
		{"tagging", rec(func(r *Record) { r.EventName = "s3:ObjectTagging:Put" }), Ignored},
		// MinIO names its metadata-only changes ObjectCreated too: no new bytes, no new answer (one
		// tagged after the memory forgot its put would be answered twice).
		{"minio tagging", rec(func(r *Record) { r.EventName = "s3:ObjectCreated:PutTagging" }), Ignored},
		{"minio tags deleted", rec(func(r *Record) { r.EventName = "s3:ObjectCreated:DeleteTagging" }), Ignored},
		{"minio retention", rec(func(r *Record) { r.EventName = "s3:ObjectCreated:PutRetention" }), Ignored},
		{"minio legal hold", rec(func(r *Record) { r.EventName = "s3:ObjectCreated:PutLegalHold" }), Ignored},
		{"multipart", rec(func(r *Record) { r.EventName = "s3:ObjectCreated:CompleteMultipartUpload" }), Publish},
		{"whole bucket's variant", rec(func(r *Record) { r.Bucket, r.Key = "photos", "images/"+id+"/a_high.webp" }), Guarded},
		{"an HLS segment", rec(func(r *Record) { r.Key = "uploads/videos/" + id + "/hls/720p_00001.m4s" }), Guarded},
		{"a storyboard", rec(func(r *Record) { r.Key = "uploads/videos/" + id + "/storyboard/storyboard.vtt" }), Guarded},
		{"outside the prefix", rec(func(r *Record) { r.Key = "other/a.jpg" }), Unwatched},
		{"another bucket", rec(func(r *Record) { r.Bucket = "logs" }), Unwatched},
		{"an image variant", rec(func(r *Record) { r.Key = "uploads/images/" + id + "/a_high.webp" }), Guarded},
		{"a recipe's variant", rec(func(r *Record) { r.Key = "uploads/images/" + id + "/avatar/a_x.avif" }), Guarded},
		{"a video", rec(func(r *Record) { r.Key = "uploads/videos/" + id + "/mp4/a.mp4" }), Guarded},
		{"a poster", rec(func(r *Record) { r.Key = "uploads/thumbnail/" + id + "/poster.jpg" }), Guarded},
		{"marked variant", rec(func(r *Record) { r.Variant = true }), Guarded},
		{"quarantine", rec(func(r *Record) { r.Bucket = "quarantine" }), Guarded},
		{"a user's dir named images", rec(func(r *Record) { r.Key = "uploads/images/cat.jpg" }), Publish},
		{"no version, no etag", rec(func(r *Record) { r.ETag = "" }), Malformed},
		{"a key the contract refuses", rec(func(r *Record) { r.Key = "uploads/../x.jpg" }), Malformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, v, err := m.Map(tc.rec)
			if v != tc.want {
				t.Fatalf("verdict %v (%v), want %v", v, err, tc.want)
			}
		})
	}
}

// Payloads that are not events, and records that are broken, are told apart from good ones.
func TestParseS3EventMalformed(t *testing.T) {
	if _, _, err := ParseS3Event([]byte(`not json`)); err == nil {
		t.Fatal("not JSON: no error")
	}
	if _, _, err := ParseS3Event([]byte(`{"foo":1}`)); err == nil || err == errNoRecords {
		t.Fatalf("no Records: %v", err)
	}
	// versitygw's connection test event: no object, ignored rather than malformed.
	if _, _, err := ParseS3Event([]byte(`{"Service":"S3","Event":"s3:TestEvent","Time":"2026-11-28T00:00:00Z","Bucket":"Test-Bucket"}`)); err != errNoRecords {
		t.Fatalf("test event: %v", err)
	}
	two := `{"Records":[` + strings.TrimSuffix(strings.TrimPrefix(awsEvent, `{"Records":[`), `]}`) +
		`,{"eventName":"s3:ObjectCreated:Put","s3":{"bucket":{},"object":{"key":"a"}}}` +
		`,{"eventName":"s3:ObjectCreated:Put","eventTime":"yesterday","s3":{"bucket":{"name":"media"},"object":{"key":"a"}}}` +
		`,"a string"]}`
	recs, bad, err := ParseS3Event([]byte(two))
	if err != nil || len(recs) != 1 || len(bad) != 3 {
		t.Fatalf("got %d records, %d bad (%v), %v; want 1 and 3", len(recs), len(bad), bad, err)
	}
	// versitygw writes keys as they are: one that is no valid escape is taken as written; one that
	// reads both ways keeps both for the store to settle.
	recs, _, _ = ParseS3Event([]byte(`{"Records":[{"eventName":"s3:ObjectCreated:Put","s3":{"bucket":{"name":"media"},"object":{"key":"a%zz b.jpg","eTag":"e"}}},` +
		`{"eventName":"s3:ObjectCreated:Put","s3":{"bucket":{"name":"media"},"object":{"key":"a+b.jpg","eTag":"e"}}}]}`))
	if len(recs) != 2 || recs[0].Key != "a%zz b.jpg" || recs[0].RawKey != "" || recs[1].Key != "a b.jpg" || recs[1].RawKey != "a+b.jpg" {
		t.Fatalf("records %+v", recs)
	}
}

func TestParseRoutes(t *testing.T) {
	rs, err := ParseRoutes(" media/uploads/*.jpg=avatar , media, photos/p/=default")
	if err != nil {
		t.Fatal(err)
	}
	want := []Route{{Bucket: "media", Prefix: "uploads/", Suffix: ".jpg", Recipe: "avatar"}, {Bucket: "media"}, {Bucket: "photos", Prefix: "p/"}}
	if len(rs) != len(want) {
		t.Fatalf("%+v", rs)
	}
	for i := range want {
		if rs[i] != want[i] {
			t.Fatalf("rule %d: %+v, want %+v", i, rs[i], want[i])
		}
	}
	for _, bad := range []string{"Media/x", "media//x", "media/a*b*c", "media/x=Bad Name", "ab"} {
		if _, err := ParseRoutes(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	for _, tmpl := range []string{"javascript:{key}", "https://api/{bucket}"} {
		if err := (Config{Enabled: true, Routes: "media", URLTemplate: tmpl}).Validate(); err == nil {
			t.Errorf("template %q accepted", tmpl)
		}
	}
	if err := (Config{Enabled: true, Routes: "media", URLTemplate: "https://api.example/media/{mediaId}?key={key}"}).Validate(); err != nil {
		t.Errorf("a good template refused: %v", err)
	}
}

// A bucket whose versioning is suspended gives every put the version ID "null" (versitygw's posix
// backend writes it in its events): two uploads of new bytes to one key there are two versions, each
// answered, told apart by their ETags as in a bucket that never versioned.
func TestNullVersionIDIsNoVersion(t *testing.T) {
	m := mapper(t, "media/uploads/")
	event := func(etag string) string {
		return strings.NewReplacer(`"sequencer"`, `"versionId":"null","sequencer"`, "d41d8cd98f00b204e9800998ecf8427e", etag).Replace(awsEvent)
	}
	a, v, err := mapOne(t, m, event("11111111111111111111111111111111"))
	if v != Publish {
		t.Fatalf("first put: %v %v", v, err)
	}
	b, v, err := mapOne(t, m, event("22222222222222222222222222222222"))
	if v != Publish {
		t.Fatalf("second put: %v %v", v, err)
	}
	if a.MediaID == b.MediaID {
		t.Fatalf("two uploads of new bytes under version ID \"null\" are one request %s: the second is never answered", a.MediaID)
	}
	if want := MediaID("media", a.S3Key, "", "11111111111111111111111111111111"); a.MediaID != want {
		t.Fatalf("mediaId %s, want %s (the ETag's, as without a version)", a.MediaID, want)
	}
}
