# weir-bench: Varnish caching with its built-in VCL (as `varnishd -b 127.0.0.1:28081`), 1 thread pool(s).
vcl 4.1;

backend default {
  .host = "127.0.0.1";
  .port = "28081";
}
