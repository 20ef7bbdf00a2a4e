# weir-bench: Varnish as a pure proxy (every request passed, no caching), 2 thread pools.
vcl 4.1;

backend default {
  .host = "127.0.0.1";
  .port = "28081";
}

sub vcl_recv {
  return (pass);
}
