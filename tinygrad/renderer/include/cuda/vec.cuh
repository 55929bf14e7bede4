template <class T, int W> struct alignas(sizeof(T) * W > 16 ? 16 : sizeof(T) * W) tg_vec { T e[W]; };
