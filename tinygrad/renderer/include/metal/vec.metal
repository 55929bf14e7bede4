template <class T, int W> struct tg_vec { T e[W]; };
